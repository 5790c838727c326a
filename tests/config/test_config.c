/* test_config.c - proves that the one configuration surface works: defaults,
 * then the JSON file, then flags, in that precedence; that JSON keys and flags
 * name the same settings; and that unknown keys, wrong types and missing
 * values are refused with a message naming the setting. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "common/config.h"
#include "tests/test_util.h"

static void test_config_defaults(void)
{
    struct cs_config c;
    config_defaults(&c);
    CHECK(strcmp(c.host, "127.0.0.1") == 0);
    CHECK_EQ_INT(c.port, 8080);
    CHECK(!c.attach);
}

static void test_config_precedence(void)
{
    char path[] = "/tmp/cs_test_config_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *json = "{\"port\": 9000, \"host\": \"0.0.0.0\", \"attach\": true, \"mem_fraction\": 0.5}";
    CHECK(write(fd, json, strlen(json)) == (ssize_t)strlen(json));
    close(fd);
    struct cs_config c;
    config_defaults(&c);
    char *argv[] = {"x", "--port", "9100", "--config", path, "--no-attach", "--ctx-size=4096", "extra"};
    char *rest[8];
    int n_rest = 0;
    struct cs_error err = {0};
    int rc = config_parse_args(&c, 8, argv, &n_rest, rest, &err);
    CHECK_EQ_INT(rc, CS_OK);
    CHECK_EQ_INT(c.port, 9100);           /* flag beats file */
    CHECK(strcmp(c.host, "0.0.0.0") == 0); /* file beats default */
    CHECK(!c.attach);
    CHECK_EQ_INT(c.ctx_size, 4096);
    CHECK_NEAR(c.mem_fraction, 0.5, 1e-12);
    CHECK_EQ_INT(n_rest, 2);
    CHECK(strcmp(rest[1], "extra") == 0);
    unlink(path);
}

static void test_config_errors(void)
{
    struct cs_config c;
    struct cs_error err = {0};
    config_defaults(&c);
    CHECK_EQ_INT(config_apply_json(&c, "{\"prot\": 1}", 11, &err), CS_EINVAL);
    CHECK(strstr(err.msg, "prot") != NULL);
    CHECK_EQ_INT(config_apply_json(&c, "{\"port\": \"x\"}", 13, &err), CS_EINVAL);
    CHECK(strstr(err.msg, "port") != NULL);
    CHECK_EQ_INT(config_apply_json(&c, "{\"port\": 1.5}", 13, &err), CS_EINVAL);
    CHECK_EQ_INT(config_apply_json(&c, "[1]", 3, &err), CS_EFORMAT);
    CHECK_EQ_INT(config_apply_json(&c, "{", 1, &err), CS_EFORMAT);
    char *argv[] = {"x", "--port"};
    CHECK_EQ_INT(config_parse_args(&c, 2, argv, NULL, NULL, &err), CS_EINVAL);
    CHECK(strstr(err.msg, "port") != NULL);
    char *argv2[] = {"x", "--bogus"};
    CHECK_EQ_INT(config_parse_args(&c, 2, argv2, NULL, NULL, &err), CS_EINVAL);
    char *argv3[] = {"x", "--port", "80x"};
    CHECK_EQ_INT(config_parse_args(&c, 3, argv3, NULL, NULL, &err), CS_EINVAL);
}

static void test_config_json_round_trip(void)
{
    struct cs_config a, b;
    struct cs_error err = {0};
    config_defaults(&a);
    a.port = 1234;
    snprintf(a.api_key, sizeof a.api_key, "secret");
    char *js = config_to_json(&a, true);
    CHECK(js != NULL);
    config_defaults(&b);
    CHECK_EQ_INT(config_apply_json(&b, js, strlen(js), &err), CS_OK);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    free(js);
    js = config_to_json(&a, false);
    CHECK(strstr(js, "secret") == NULL);
    free(js);
}

/* cuda_graphs: on by default; off from the file, --no-cuda-graphs or
 * --cuda-graphs=false; on again from --cuda-graphs; carried in the JSON the
 * workers get; listed by the usage. And cuda_pdl: on by default, off from
 * --no-cuda-pdl. */
static void test_config_cuda_graphs(void)
{
    struct cs_config c, pdl;
    struct cs_error err = {0};
    config_defaults(&c);
    CHECK(c.cuda_graphs);
    const char *off = "{\"cuda_graphs\": false}", *bad = "{\"cuda_graphs\": 0}";
    CHECK_EQ_INT(config_apply_json(&c, off, strlen(off), &err), CS_OK);
    CHECK(!c.cuda_graphs);
    CHECK_EQ_INT(config_apply_json(&c, bad, strlen(bad), &err), CS_EINVAL);
    CHECK(strstr(err.msg, "cuda_graphs") != NULL);

    char *argv1[] = {"x", "--no-cuda-graphs"};
    config_defaults(&c);
    CHECK_EQ_INT(config_parse_args(&c, 2, argv1, NULL, NULL, &err), CS_OK);
    CHECK(!c.cuda_graphs);
    char *argv2[] = {"x", "--cuda-graphs"};
    CHECK_EQ_INT(config_parse_args(&c, 2, argv2, NULL, NULL, &err), CS_OK);
    CHECK(c.cuda_graphs);
    char *argv3[] = {"x", "--cuda-graphs=false"};
    CHECK_EQ_INT(config_parse_args(&c, 2, argv3, NULL, NULL, &err), CS_OK);
    CHECK(!c.cuda_graphs);
    char *argv4[] = {"x", "--no-cuda-graphs=true"};
    CHECK_EQ_INT(config_parse_args(&c, 2, argv4, NULL, NULL, &err), CS_EINVAL);

    /* cuda_pdl: the same shape of switch, on by default */
    config_defaults(&pdl);
    CHECK(pdl.cuda_pdl);
    char *argv5[] = {"x", "--no-cuda-pdl"};
    CHECK_EQ_INT(config_parse_args(&pdl, 2, argv5, NULL, NULL, &err), CS_OK);
    CHECK(!pdl.cuda_pdl);

    char *js = config_to_json(&c, false);
    CHECK(js != NULL && strstr(js, "\"cuda_graphs\":false") != NULL);
    struct cs_config w;
    config_defaults(&w);
    CHECK(w.cuda_graphs);
    CHECK_EQ_INT(config_apply_json(&w, js, strlen(js), &err), CS_OK);
    CHECK(!w.cuda_graphs);
    free(js);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL);
    if (f) {
        config_usage(f);
        fclose(f);
        CHECK(text && strstr(text, "--cuda-graphs") != NULL);
        free(text);
    }
}

int main(void)
{
    RUN(test_config_defaults);
    RUN(test_config_precedence);
    RUN(test_config_errors);
    RUN(test_config_json_round_trip);
    RUN(test_config_cuda_graphs);
    return test_report();
}
