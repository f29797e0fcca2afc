/* Shared test helpers: scratch directories and deterministic records. */
#ifndef USH_TEST_HELPERS_H
#define USH_TEST_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ushuffle/ushuffle.h>
#include <ushuffle/worker.h>

/* Creates a fresh directory under $USH_TEST_DIR (default: the build
 * directory, a real disk; /tmp may be tmpfs) and returns its path
 * (static storage, one per call slot). */
const char *th_tmpdir(const char *tag);
/* th_tmpdir() for the running test, removed by th_teardown() even when
 * the test fails: cmocka_unit_test_teardown(test, th_teardown). */
const char *th_scratch(const char *tag);
int th_teardown(void **state);
/* A whole file in malloc'd memory (the caller frees it); fails the test
 * if it cannot be read. */
void *th_read_file(const char *path, size_t *len);
/* Removes path recursively. */
void th_rmrf(const char *path);
/* Fills buf with len bytes derived from seed (deterministic). */
void th_fill(void *buf, size_t len, uint64_t seed);
/* Checks buf against th_fill(seed); returns 1 if equal. */
int th_check(const void *buf, size_t len, uint64_t seed);
/* xorshift64* PRNG. */
uint64_t th_rand(uint64_t *state);
/* Asserts ret == 0, printing ush_last_error() otherwise. */
#define th_ok(expr)                                                          \
	do {                                                                 \
		int th_ret_ = (expr);                                        \
		if (th_ret_ != 0)                                            \
			fail_msg("%s = %d (%s): %s", #expr, th_ret_,         \
				 ush_err_name(th_ret_), ush_last_error());   \
	} while (0)

#endif
