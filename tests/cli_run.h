/*
 * Runs the real ushuffle binary (USH_CLI_PATH) for the CLI tests: fork and
 * exec, stdout and stderr captured in temporary files, the exit status
 * (128 + signal if it died of one), and the JSON report parsed by json-c.
 */
#ifndef USH_TEST_CLI_RUN_H
#define USH_TEST_CLI_RUN_H

#include "helpers.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct cli_out {
	int status;
	char *out, *err;
};

struct cli_proc {
	pid_t pid;
	FILE *out, *err;
};

static inline char *cli_slurp(FILE *f)
{
	fflush(f);
	long n = ftell(f);
	char *s = malloc((size_t)n + 1);
	rewind(f);
	size_t got = fread(s, 1, (size_t)n, f);
	s[got] = '\0';
	fclose(f);
	return s;
}

/* Starts ushuffle with argv (NULL-terminated, without argv[0]) in cwd. */
static inline struct cli_proc cli_start(const char *cwd,
					const char *const *args)
{
	struct cli_proc p = {.out = tmpfile(), .err = tmpfile()};
	const char *argv[64] = {USH_CLI_PATH};
	size_t n = 1;
	for (; args[n - 1] && n < 63; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	assert_non_null(p.out);
	assert_non_null(p.err);
	fflush(stdout);
	fflush(stderr);
	p.pid = fork();
	assert_true(p.pid >= 0);
	if (p.pid == 0) {
		if ((cwd && chdir(cwd)) || dup2(fileno(p.out), 1) < 0 ||
		    dup2(fileno(p.err), 2) < 0)
			_exit(126);
		execv(USH_CLI_PATH, (char *const *)argv);
		_exit(127);
	}
	return p;
}

static inline struct cli_out cli_wait(struct cli_proc *p)
{
	struct cli_out r = {0};
	int st = 0;
	while (waitpid(p->pid, &st, 0) < 0)
		if (errno != EINTR)
			fail_msg("waitpid(%d): %s", (int)p->pid,
				 strerror(errno));
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r.out = cli_slurp(p->out);
	r.err = cli_slurp(p->err);
	return r;
}

/* Runs ushuffle with the NULL-terminated arguments in cwd. */
#define cli_run(cwd, ...)                                                    \
	cli_runv((cwd), (const char *const[]){__VA_ARGS__, NULL})
static inline struct cli_out cli_runv(const char *cwd, const char *const *args)
{
	struct cli_proc p = cli_start(cwd, args);
	return cli_wait(&p);
}

static inline void cli_free(struct cli_out *r)
{
	free(r->out);
	free(r->err);
}

/* Asserts the exit status, printing both outputs when it differs. */
static inline void cli_expect(const struct cli_out *r, int status)
{
	if (r->status != status)
		fail_msg("exit status %d, expected %d\n--- stdout:\n%s\n"
			 "--- stderr:\n%s", r->status, status, r->out, r->err);
}

/* The shuffle id the CLI derives from a job name (FNV-1a, job.c). */
static inline uint32_t cli_shuffle_id(const char *name)
{
	uint32_t h = 2166136261u;
	for (; *name; name++)
		h = (h ^ (uint8_t)*name) * 16777619u;
	return h;
}

/* Asserts that s contains needle. */
static inline void cli_has(const char *s, const char *needle)
{
	if (!strstr(s, needle))
		fail_msg("missing \"%s\" in:\n%s", needle, s);
}

static inline json_object *cli_json(const struct cli_out *r)
{
	json_object *j = json_tokener_parse(r->out);
	if (!j)
		fail_msg("stdout is not JSON:\n%s\n--- stderr:\n%s", r->out,
			 r->err);
	return j;
}

/* j["a"]["b"] for path "a/b"; fails if a key is missing. */
static inline json_object *jget(json_object *j, const char *path)
{
	char key[64];
	while (*path) {
		size_t n = strcspn(path, "/");
		snprintf(key, sizeof(key), "%.*s", (int)n, path);
		json_object *next;
		if (!json_object_object_get_ex(j, key, &next))
			fail_msg("JSON has no \"%s\" (in %s)", key, path);
		j = next;
		path += n + (path[n] == '/');
	}
	return j;
}

static inline uint64_t jint(json_object *j, const char *path)
{
	return json_object_get_uint64(jget(j, path));
}

static inline const char *jstr(json_object *j, const char *path)
{
	return json_object_get_string(jget(j, path));
}

#endif
