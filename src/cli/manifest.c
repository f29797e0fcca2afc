/*
 * The manifest a write job leaves beside its spill files (json-c): the
 * job's shape, how many records each map committed to each partition,
 * and each map's status (hex), so a later --rw=read reads exactly the
 * attempts this job committed, knows what to expect without repeating
 * options, and can tell a missing record from a short job.
 */
#include "cli.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MANIFEST "ushuffle-job.json"

void manifest_path(char *buf, size_t n, const char *dir, uint32_t shuffle)
{
	snprintf(buf, n, "%s/s%u/" MANIFEST, dir, shuffle);
}

static json_object *u64_matrix(const uint64_t *v, uint32_t rows,
			       uint32_t cols)
{
	json_object *a = json_object_new_array_ext((int)rows);
	for (uint32_t r = 0; r < rows; r++) {
		json_object *row = json_object_new_array_ext((int)cols);
		for (uint32_t c = 0; c < cols; c++)
			json_object_array_add(row, json_object_new_uint64(
				v[(size_t)r * cols + c]));
		json_object_array_add(a, row);
	}
	return a;
}

int manifest_save(const struct manifest *m, const struct job_opts *o,
		  char *err, size_t n)
{
	char path[PATH_MAX + 32], tmp[PATH_MAX + 40], codec[32], dir[PATH_MAX];
	json_object *j = json_object_new_object();
	job_dir(o, 0, dir, sizeof(dir));
	opt_format(opt_find("codec"), o, codec, sizeof(codec));
	json_object_object_add(j, "ushuffle version",
			       json_object_new_string(CLI_NAME "-"
						      USH_VERSION_STRING));
	json_object_object_add(j, "name", json_object_new_string(o->name));
	json_object_object_add(j, "shuffle",
			       json_object_new_uint64(m->shuffle));
	json_object_object_add(j, "maps", json_object_new_uint64(m->maps));
	json_object_object_add(j, "partitions",
			       json_object_new_uint64(m->partitions));
	json_object *rs = json_object_new_array();
	json_object_array_add(rs, json_object_new_uint64(m->rec_min));
	json_object_array_add(rs, json_object_new_uint64(m->rec_max));
	json_object_object_add(j, "record_size", rs);
	json_object_object_add(j, "codec", json_object_new_string(codec));
	json_object_object_add(j, "records",
			       u64_matrix(m->records, m->maps, m->partitions));
	json_object_object_add(j, "bytes",
			       u64_matrix(m->bytes, m->maps, m->partitions));
	json_object_object_add(j, "workers",
			       json_object_new_string(m->workers));
	json_object_object_add(j, "embedded_worker",
			       json_object_new_boolean(m->embedded));
	json_object *st = json_object_new_array_ext((int)m->maps);
	for (uint32_t i = 0; i < m->maps; i++) {
		const uint8_t *b = m->status[i].data;
		char *hex = malloc(2 * m->status[i].len + 1);
		for (size_t k = 0; hex && k < m->status[i].len; k++)
			sprintf(hex + 2 * k, "%02x", b[k]);
		if (hex)
			hex[2 * m->status[i].len] = 0;
		json_object_array_add(st, json_object_new_string(hex ? hex : ""));
		free(hex);
	}
	json_object_object_add(j, "map_statuses", st);
	/* The disk target made these; a net job's spill lives elsewhere. */
	snprintf(tmp, sizeof(tmp), "%s/s%u", dir, m->shuffle);
	mkdir(tmp, 0755); /* in --dir, which exists (checked at parse) */
	manifest_path(path, sizeof(path), dir, m->shuffle);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	errno = 0; /* the mkdir()s above leave EEXIST */
	int ret = json_object_to_file_ext(tmp, j, JSON_C_TO_STRING_PLAIN);
	json_object_put(j);
	if (ret || rename(tmp, path)) {
		ret = errno ? -errno : -EIO;
		snprintf(err, n, "cannot write %s: %s", path, strerror(-ret));
		unlink(tmp);
		return ret;
	}
	return 0;
}

static int get_u32(json_object *j, const char *key, uint32_t *v)
{
	json_object *f;
	if (!json_object_object_get_ex(j, key, &f) ||
	    !json_object_is_type(f, json_type_int))
		return -1;
	uint64_t u = json_object_get_uint64(f);
	*v = (uint32_t)u;
	return u == *v ? 0 : -1;
}

int hex_digit(char c)
{
	return c >= '0' && c <= '9' ? c - '0' :
	       c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Map i's status from its hex string: 0, or -1 if it is not hex. */
static int get_status(json_object *a, uint32_t i, struct ush_status *st)
{
	const char *hex = json_object_get_string(json_object_array_get_idx(a, i));
	size_t n = hex ? strlen(hex) : 0;
	uint8_t *b = n && n % 2 == 0 ? malloc(n / 2) : NULL;
	for (size_t k = 0; b && k < n / 2; k++) {
		int hi = hex_digit(hex[2 * k]), lo = hex_digit(hex[2 * k + 1]);
		if (hi < 0 || lo < 0) {
			free(b);
			return -1;
		}
		b[k] = (uint8_t)(hi << 4 | lo);
	}
	st->data = b;
	st->len = n / 2;
	return b ? 0 : -1;
}

static int get_matrix(json_object *j, const char *key, uint64_t *v,
		      uint32_t rows, uint32_t cols)
{
	json_object *a;
	if (!json_object_object_get_ex(j, key, &a) ||
	    json_object_array_length(a) != rows)
		return -1;
	for (uint32_t r = 0; r < rows; r++) {
		json_object *row = json_object_array_get_idx(a, r);
		if (json_object_array_length(row) != cols)
			return -1;
		for (uint32_t c = 0; c < cols; c++)
			v[(size_t)r * cols + c] = json_object_get_uint64(
				json_object_array_get_idx(row, c));
	}
	return 0;
}

int manifest_load(struct manifest *m, const struct job_opts *o, char *err,
		  size_t n)
{
	char path[PATH_MAX + 32], dir[PATH_MAX];
	memset(m, 0, sizeof(*m));
	m->shuffle = job_shuffle_id(o->name);
	/* In the first directory of the write's list: the first of this
	 * one's that has it, so the list may come in another order. */
	unsigned nd = job_dir(o, 0, dir, sizeof(dir));
	int miss = -ENOENT;
	for (unsigned i = 0; miss && i < nd; i++) {
		job_dir(o, i, dir, sizeof(dir));
		manifest_path(path, sizeof(path), dir, m->shuffle);
		miss = access(path, R_OK) ? -errno : 0;
	}
	if (miss) {
		job_dir(o, 0, dir, sizeof(dir));
		manifest_path(path, sizeof(path), dir, m->shuffle);
		snprintf(err, n, "no output of job '%s' in --dir=%s: %s: %s; "
			 "run --rw=write (or --rw=shuffle --keep) with the same "
			 "--name and --dir first", o->name, o->dir, path,
			 strerror(-miss));
		return miss;
	}
	json_object *j = json_object_from_file(path), *rs = NULL;
	uint32_t shuffle = 0;
	int ret = j ? 0 : -1;
	if (!ret)
		ret = get_u32(j, "shuffle", &shuffle) |
		      get_u32(j, "maps", &m->maps) |
		      get_u32(j, "partitions", &m->partitions);
	if (!ret && (shuffle != m->shuffle || !m->maps || !m->partitions ||
		     !json_object_object_get_ex(j, "record_size", &rs) ||
		     json_object_array_length(rs) != 2))
		ret = -1;
	if (!ret) {
		m->rec_min = (uint32_t)json_object_get_uint64(
			json_object_array_get_idx(rs, 0));
		m->rec_max = (uint32_t)json_object_get_uint64(
			json_object_array_get_idx(rs, 1));
		size_t cells = (size_t)m->maps * m->partitions;
		m->records = calloc(cells, sizeof(*m->records));
		m->bytes = calloc(cells, sizeof(*m->bytes));
		ret = m->records && m->bytes && m->rec_min <= m->rec_max ? 0
									 : -1;
	}
	if (!ret)
		ret = get_matrix(j, "records", m->records, m->maps,
				 m->partitions) |
		      get_matrix(j, "bytes", m->bytes, m->maps, m->partitions);
	json_object *a = NULL, *w = NULL;
	if (!ret && (!json_object_object_get_ex(j, "map_statuses", &a) ||
		     json_object_array_length(a) != m->maps ||
		     !json_object_object_get_ex(j, "workers", &w) ||
		     !(m->status = calloc(m->maps, sizeof(*m->status)))))
		ret = -1;
	for (uint32_t i = 0; !ret && i < m->maps; i++)
		ret = get_status(a, i, &m->status[i]);
	json_object *e = NULL;
	if (!ret && !json_object_object_get_ex(j, "embedded_worker", &e))
		ret = -1;
	if (!ret) {
		snprintf(m->workers, sizeof(m->workers), "%s",
			 json_object_get_string(w));
		m->embedded = json_object_get_boolean(e);
	}
	json_object_put(j);
	if (ret) {
		ret = USH_ECORRUPT;
		snprintf(err, n, "%s: not a manifest of job '%s' (corrupt or "
			 "from another version); run --rw=write (or "
			 "--rw=shuffle --keep) with the same --name and --dir "
			 "again", path, o->name);
		manifest_free(m);
	}
	return ret;
}

int manifest_target(const struct manifest *m)
{
	return m->workers[0] ? TARGET_NET : TARGET_DISK;
}

void manifest_free(struct manifest *m)
{
	for (uint32_t i = 0; m->status && i < m->maps; i++)
		free((void *)m->status[i].data);
	free(m->status);
	free(m->records);
	free(m->bytes);
	m->records = m->bytes = NULL;
	m->status = NULL;
}
