/* test_buf.c - proves common/buf.c keeps content NUL-terminated across growth,
 * formats with buf_printf, truncates, detaches and frees, and that an empty
 * buffer reads as "". */
#include "common/buf.h"
#include "common/status.h"
#include "tests/test_util.h"

#include <stdlib.h>
#include <string.h>

static void test_buf_empty_reads_as_empty_string(void)
{
    struct buf b;
    buf_init(&b);
    CHECK(b.data == NULL);
    CHECK_EQ_INT(strlen(buf_cstr(&b)), 0);
    buf_free(&b);
    CHECK(b.data == NULL && b.len == 0);
}

static void test_buf_append_grows_and_terminates(void)
{
    struct buf b = {0};
    for (int i = 0; i < 1000; i++)
        CHECK_EQ_INT(buf_append_str(&b, "abc"), CS_OK);
    CHECK_EQ_INT(b.len, 3000);
    CHECK(b.cap > b.len);
    CHECK(b.data[3000] == '\0');
    CHECK(memcmp(b.data + 2997, "abc", 3) == 0);
    CHECK_EQ_INT(buf_append(&b, "x\0y", 3), CS_OK); /* embedded NUL kept */
    CHECK_EQ_INT(b.len, 3003);
    CHECK(b.data[3001] == '\0' && b.data[3002] == 'y' && b.data[3003] == '\0');
    buf_free(&b);
}

static void test_buf_printf_truncate_detach(void)
{
    struct buf b = {0};
    CHECK_EQ_INT(buf_printf(&b, "%s=%d", "n", 42), CS_OK);
    CHECK_EQ_INT(buf_append_byte(&b, '!'), CS_OK);
    CHECK(strcmp(buf_cstr(&b), "n=42!") == 0);
    buf_truncate(&b, 2);
    CHECK(strcmp(buf_cstr(&b), "n=") == 0);
    buf_truncate(&b, 10); /* longer than len: no-op */
    CHECK_EQ_INT(b.len, 2);
    size_t len = 0;
    char *s = buf_detach(&b, &len);
    CHECK(s && strcmp(s, "n=") == 0 && len == 2);
    CHECK(b.data == NULL && b.len == 0);
    free(s);
    s = buf_detach(&b, &len); /* empty buffer still gives a string */
    CHECK(s && s[0] == '\0' && len == 0);
    free(s);
}

static void test_buf_reserve_overflow_is_enomem(void)
{
    struct buf b = {0};
    CHECK_EQ_INT(buf_append_str(&b, "x"), CS_OK);
    CHECK_EQ_INT(buf_reserve(&b, (size_t)-1), CS_ENOMEM);
    CHECK(strcmp(buf_cstr(&b), "x") == 0);
    buf_free(&b);
}

int main(void)
{
    RUN(test_buf_empty_reads_as_empty_string);
    RUN(test_buf_append_grows_and_terminates);
    RUN(test_buf_printf_truncate_detach);
    RUN(test_buf_reserve_overflow_is_enomem);
    return test_report();
}
