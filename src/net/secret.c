/*
 * The client's secrets, one per application and one for the others,
 * given with ush_auth_secret() or ush_auth_secret_file(), else taken from
 * $USHUFFLE_SECRET. A process-wide table (as the log sink): the secret is
 * a property of the application a process works for, not of one call,
 * and the writers, readers, drops and heartbeats of that application all
 * prove it the same way.
 */
#define _GNU_SOURCE
#include "net/net.h"
#include "net/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct secret {
	char app[USHI_PROTO_APP_MAX + 1]; /* "": every other application */
	size_t len;
	uint8_t key[USHI_SECRET_MAX];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct secret *table;
static size_t nsecrets;

/* Sets (len > 0) or forgets (len 0) the secret of app ("" for others).
 * Lock held. */
static int put(const char *app, const uint8_t *key, size_t len)
{
	size_t i = 0;
	while (i < nsecrets && strcmp(table[i].app, app))
		i++;
	if (!len) {
		if (i < nsecrets) {
			explicit_bzero(&table[i], sizeof(table[i]));
			table[i] = table[--nsecrets];
		}
		return 0;
	}
	if (i == nsecrets) {
		/* Rare and small: grown one entry at a time. */
		struct secret *n = ushi_malloc((nsecrets + 1) * sizeof(*n));
		if (!n)
			return ushi_fail(-ENOMEM, "auth: secret table");
		if (nsecrets) {
			memcpy(n, table, nsecrets * sizeof(*n));
			explicit_bzero(table, nsecrets * sizeof(*n));
		}
		ushi_free(table);
		table = n;
		nsecrets++;
		snprintf(table[i].app, sizeof(table[i].app), "%s", app);
	}
	memcpy(table[i].key, key, len);
	table[i].len = len;
	return 0;
}

static int check_app(const char *app)
{
	if (app && !proto_app_ok(app))
		return ushi_fail(-EINVAL, "auth: application id '%.80s' is not "
				"1..64 characters of A-Z a-z 0-9 . _ : -", app);
	return 0;
}

int ush_auth_secret(const char *app, const void *secret, size_t len)
{
	int ret = check_app(app);
	if (!ret && (secret || len))
		ret = secret ? auth_secret_len_ok(len, "given") :
			       ushi_fail(-EINVAL, "auth: NULL secret of %zu "
					"bytes", len);
	if (ret)
		return ret;
	pthread_mutex_lock(&lock);
	ret = put(app ? app : "", secret, secret ? len : 0);
	pthread_mutex_unlock(&lock);
	return ret;
}

int ush_auth_secret_file(const char *app, const char *path)
{
	uint8_t key[USHI_SECRET_MAX];
	bool loose;
	int ret = check_app(app);
	if (ret)
		return ret;
	if (!path)
		return ushi_fail(-EINVAL, "auth: no secret file given");
	int n = auth_read_secret(AT_FDCWD, path, false, key, &loose);
	if (n < 0)
		return n;
	if (loose)
		ushi_warn("secret file %s is readable by group or others: "
			  "chmod 600 it", path);
	pthread_mutex_lock(&lock);
	ret = put(app ? app : "", key, (size_t)n);
	pthread_mutex_unlock(&lock);
	explicit_bzero(key, sizeof(key));
	return ret;
}

int net_secret(const char *app, uint8_t *key)
{
	int n = 0;
	pthread_mutex_lock(&lock);
	const struct secret *any = NULL;
	for (size_t i = 0; i < nsecrets; i++) {
		if (!strcmp(table[i].app, app)) {
			any = &table[i];
			break;
		}
		if (!table[i].app[0])
			any = &table[i];
	}
	if (any) {
		memcpy(key, any->key, any->len);
		n = (int)any->len;
	}
	pthread_mutex_unlock(&lock);
	if (n)
		return n;
	const char *env = getenv(USHI_SECRET_ENV);
	if (!env || !*env)
		return 0;
	size_t len = strlen(env);
	if (auth_secret_len_ok(len, "in $" USHI_SECRET_ENV))
		return -EINVAL;
	memcpy(key, env, len);
	return (int)len;
}
