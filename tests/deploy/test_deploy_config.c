/* test_deploy_config.c - proves that the example configuration shipped as
 * /etc/cmpserve/cmpserve.json (deploy/cmpserve.json) is accepted by the real
 * parser (config_load_file refuses unknown keys and wrong types), and that it
 * sets what the systemd units rely on: attach mode (workers started by
 * systemd) and the runtime directory /run/cmpserve of RuntimeDirectory=. */
#include <string.h>

#include "common/config.h"
#include "test_util.h"

static const char *example_path;

static void test_deploy_config_parses(void)
{
    struct cs_config cfg;
    struct cs_error err = {0};
    config_defaults(&cfg);
    int rc = config_load_file(&cfg, example_path, &err);
    if (rc)
        fprintf(stderr, "config_load_file: %s\n", err.msg);
    CHECK_EQ_INT(rc, CS_OK);
}

static void test_deploy_config_systemd_settings(void)
{
    struct cs_config cfg;
    struct cs_error err = {0};
    config_defaults(&cfg);
    CHECK(!cfg.attach); /* the default spawns workers: the file must change it */
    CHECK_EQ_INT(config_load_file(&cfg, example_path, &err), CS_OK);
    CHECK(cfg.attach);
    CHECK(strcmp(cfg.run_dir, "/run/cmpserve") == 0);
    CHECK(strcmp(cfg.gpus, "0,1,2") == 0);
    CHECK(cfg.model[0] == '/');
    CHECK(!cfg.allow_test_options);
    CHECK(cfg.test_script[0] == '\0');
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s deploy/cmpserve.json\n", argv[0]);
        return 2;
    }
    example_path = argv[1];
    RUN(test_deploy_config_parses);
    RUN(test_deploy_config_systemd_settings);
    return test_report();
}
