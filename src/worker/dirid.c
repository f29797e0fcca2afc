/*
 * Directory identity: each of --dir's directories holds a marker,
 * "ushuffled.id", naming the worker it belongs to, its own id, and every
 * directory of that worker with its path and what it may hold (the
 * home, with the commit log; shuffle logs; nothing). Text, written to a
 * temporary file, synced and renamed, and checked by a CRC32C on its
 * last line (docs/protocol.md §4).
 *
 * The home's marker is the one that counts: a directory is recorded
 * there as holding shuffle logs before the first one is made in it
 * (wk_dirid_hold()), so a start whose list lacks the home or such a
 * directory is refused instead of reading it as empty, and the start-up
 * sweep never runs over directories not proven to be this worker's.
 * At each start every marker is rewritten (the home's first) with the
 * list as given: new directories join, and one recorded as empty may
 * leave.
 */
#define _GNU_SOURCE
#include "worker/thread.h"
#include "worker/dirid.h"
#include "worker/wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <isa-l/crc.h>

#define MAGIC "ushuffled-dir 1"
#define MARKER_MAX (1u << 20)

enum kind { K_EMPTY, K_LOGS, K_HOME };
static const char *const kinds[] = {"empty", "logs", "home"};

struct member {
	uint8_t id[16];
	enum kind kind;
	const char *path; /* as listed when the marker was written */
};

/* A directory as this start finds it. */
struct seen {
	bool marked;          /* it has a marker */
	uint8_t worker[16], self[16];
	struct member *m;     /* the marker's directories (into buf) */
	unsigned n;
	char *buf;
	bool clog;            /* it holds a commit log (or snapshot) */
	bool logs;            /* it holds shuffle directories s<S> */
	bool matched;         /* a member of the home's marker */
};

struct hex {
	char s[33];
};

static struct hex hex(const uint8_t *id)
{
	struct hex h;
	for (int i = 0; i < 16; i++)
		snprintf(h.s + 2 * i, 3, "%02x", id[i]);
	return h;
}

/* 32 lower-case hex digits at s into id: 0, or -1. */
static int unhex(const char *s, uint8_t *id)
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		const char *p = s[i] ? strchr(digits, s[i]) : NULL;
		if (!p)
			return -1;
		id[i / 2] = (uint8_t)(id[i / 2] << 4 | (p - digits));
	}
	return 0;
}

static int new_id(uint8_t *id)
{
	return ushi_random(id, 16, "worker: a directory id");
}

/* ----------------------------------------------------------- reading */

static uint32_t text_crc(const char *b, size_t n)
{
	return ~crc32_iscsi((unsigned char *)b, (int)n, 0xffffffffu);
}

/* Checks the last line (the CRC of the text before it) and cuts it off:
 * *n becomes the text's length. NULL, or what is wrong. */
static const char *check_crc(char *b, size_t *n)
{
	if (!*n || b[*n - 1] != '\n')
		return "truncated: it does not end with its crc32c line";
	b[*n - 1] = 0;
	char *last = strrchr(b, '\n');
	last = last ? last + 1 : b;
	unsigned crc;
	char tail;
	if (sscanf(last, "crc32c %8x%c", &crc, &tail) != 1 ||
	    strlen(last) != 15)
		return "truncated: its last line is not its crc32c";
	*n = (size_t)(last - b);
	if (text_crc(b, *n) != crc)
		return "damaged: its crc32c does not match its text";
	b[*n] = 0;
	return NULL;
}

/* "member <id> <kind> <path>" */
static const char *parse_member(char *l, struct member *m)
{
	if (strncmp(l, "member ", 7) || unhex(l + 7, m->id) || l[39] != ' ')
		return "not a member line";
	char *k = l + 40, *sp = strchr(k, ' ');
	if (!sp || !sp[1])
		return "a member line without its kind and path";
	*sp = 0;
	for (m->kind = K_EMPTY; m->kind <= K_HOME; m->kind++)
		if (!strcmp(k, kinds[m->kind]))
			break;
	if (m->kind > K_HOME)
		return "a member of an unknown kind";
	m->path = sp + 1;
	return NULL;
}

/* The marker's text (its CRC checked, each line ending in '\n') into
 * s; NULL, or what is wrong at *line. */
static const char *parse(char *b, struct seen *s, unsigned *line)
{
	unsigned lines = 0, homes = 0;
	for (const char *p = b; (p = strchr(p, '\n')); p++)
		lines++;
	if (lines < 4)
		return "too short";
	s->m = ushi_calloc(lines - 3, sizeof(*s->m));
	if (!s->m)
		return "out of memory";
	for (char *l = b, *nl; *l; l = nl + 1) {
		const char *why = NULL;
		nl = strchr(l, '\n');
		*nl = 0;
		++*line;
		if (*line == 1 && strcmp(l, MAGIC))
			why = strncmp(l, "ushuffled-dir ", 14) ?
				      "not a directory marker" :
				      "of another version (this worker reads "
				      MAGIC ")";
		else if (*line == 2 && (strncmp(l, "worker ", 7) ||
					unhex(l + 7, s->worker) || l[39]))
			why = "not its worker line";
		else if (*line == 3 && (strncmp(l, "dir ", 4) ||
					unhex(l + 4, s->self) || l[36]))
			why = "not its dir line";
		else if (*line > 3 && !(why = parse_member(l, &s->m[s->n])))
			homes += s->m[s->n++].kind == K_HOME;
		if (why)
			return why;
	}
	*line = 0;
	if (homes != 1)
		return "not exactly one home among its members";
	for (unsigned i = 0; i < s->n; i++)
		if (!memcmp(s->m[i].id, s->self, 16))
			return NULL;
	return "its own directory is not among its members";
}

static int damaged(const struct wk_dir *d, const char *why, unsigned line)
{
	char at[32] = "";
	if (line)
		snprintf(at, sizeof(at), "line %u: ", line);
	return ushi_fail(USH_ECORRUPT, "worker: %s/%s: %s%s: this directory's "
			"identity cannot be read (docs/operations.md, "
			"\"Several disks\")", d->path, WK_DIRID, at, why);
}

/* d's marker, whole, into *buf (one byte more, for a NUL; the caller
 * frees it) and *n: 0 (*buf NULL where there is none), -errno, or 0 with
 * *why saying why it is no marker. */
static int load(const struct wk_dir *d, char **buf, size_t *n,
		const char **why)
{
	*buf = NULL;
	*why = NULL;
	int fd = openat(d->fd, WK_DIRID, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;
	struct stat st;
	int ret = 0;
	if (fd < 0 || fstat(fd, &st))
		ret = -errno;
	else if (!S_ISREG(st.st_mode))
		*why = "not a regular file";
	else if (st.st_size > MARKER_MAX)
		*why = "over 1 MiB: not a directory marker";
	else if (!(*buf = ushi_malloc((size_t)st.st_size + 1)))
		ret = -ENOMEM;
	else
		ret = ushi_pread_all(fd, *buf, *n = (size_t)st.st_size, 0);
	if (fd >= 0)
		close(fd);
	return ret;
}

static int read_marker(const struct wk_dir *d, struct seen *s)
{
	const char *why;
	size_t n = 0;
	int ret = load(d, &s->buf, &n, &why);
	if (ret)
		return ushi_fail(ret, "worker: reading %s/%s: %s", d->path,
				WK_DIRID, ush_strerror(ret));
	if (!s->buf && !why)
		return 0;
	unsigned line = 0;
	if (!why)
		why = check_crc(s->buf, &n);
	if (!why)
		why = parse(s->buf, s, &line);
	if (why)
		return damaged(d, why, line);
	s->marked = true;
	return 0;
}

/* Whether d holds one of names. */
static bool has_any(const struct wk_dir *d, const char *const *names)
{
	struct stat st;
	for (; *names; names++)
		if (!fstatat(d->fd, *names, &st, AT_SYMLINK_NOFOLLOW))
			return true;
	return false;
}

/* Whether d holds a shuffle directory s<S>. */
static bool has_shuffles(const struct wk_dir *d)
{
	int fd = openat(d->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dd = fd >= 0 ? fdopendir(fd) : NULL;
	bool found = false;
	struct dirent *de;
	while (dd && !found && (de = readdir(dd))) {
		unsigned s;
		char extra;
		found = sscanf(de->d_name, "s%u%c", &s, &extra) == 1;
	}
	if (dd)
		closedir(dd);
	else if (fd >= 0)
		close(fd);
	return found;
}

static int look(const struct wk_dir *d, struct seen *s)
{
	static const char *const logs[] = {WK_LOG_FILE, WK_SNAP_FILE,
					   WK_LOG_T0_FILE, NULL};
	s->clog = has_any(d, logs);
	s->logs = has_shuffles(d);
	return read_marker(d, s);
}

/* ------------------------------------------------------------ checks */

/* Every marked directory names the same worker: wk->wid. Returns the
 * first marked one's index (ndirs: none is marked), or -EINVAL. */
static int one_worker(struct ush_worker *wk, const struct seen *sn)
{
	unsigned first = wk->ndirs;
	for (unsigned i = 0; i < wk->ndirs; i++) {
		if (!sn[i].marked)
			continue;
		if (first == wk->ndirs) {
			first = i;
			memcpy(wk->wid, sn[i].worker, 16);
		} else if (memcmp(wk->wid, sn[i].worker, 16)) {
			return wk_refuse(-EINVAL, "worker: --dir: %s and %s "
					"belong to two workers (their %s name "
					"workers %s and %s): give one worker's "
					"directories", wk->dirs[first].path,
					wk->dirs[i].path, WK_DIRID,
					hex(wk->wid).s, hex(sn[i].worker).s);
		}
	}
	return (int)first;
}

/* The present directory that is member m: by its marker, or, without
 * one, by its path where it was there before this start and holds data
 * (its marker lost, or never written: a crash at the first start).
 * Returns its index, or ndirs. */
static unsigned find_member(struct ush_worker *wk, struct seen *sn,
			    const struct member *m)
{
	for (unsigned i = 0; i < wk->ndirs; i++)
		if (sn[i].marked && !memcmp(sn[i].self, m->id, 16))
			return i;
	for (unsigned i = 0; i < wk->ndirs; i++)
		if (!sn[i].marked && !wk->dirs[i].made &&
		    (sn[i].logs || sn[i].clog) &&
		    !strcmp(wk->dirs[i].path, m->path))
			return i;
	return wk->ndirs;
}

/* A member with data that the list lacks. */
static int missing(struct ush_worker *wk, const struct seen *sn,
		   const struct member *m)
{
	const char *made = "";
	for (unsigned i = 0; i < wk->ndirs; i++)
		if (!sn[i].marked && !strcmp(wk->dirs[i].path, m->path))
			made = "; the directory there now is new, with no "
			       "marker: is its disk mounted?";
	if (m->kind == K_HOME)
		return wk_refuse(-EINVAL, "worker: --dir lacks %s, this "
				"worker's home (its commit log; id %s): "
				"without it the worker would start with no "
				"commits; give it again (any order)%s",
				m->path, hex(m->id).s, made);
	return wk_refuse(-EINVAL, "worker: --dir lacks %s, a directory of "
			"this worker that may hold shuffle logs (id %s): give "
			"it again (any order); to take it out, drop its "
			"shuffles and start once with it listed (the markers "
			"are rewritten at a start)%s", m->path,
			hex(m->id).s, made);
}

/* The home's marker (h) names the directories: each one that may hold
 * data must be here. */
static int match_members(struct ush_worker *wk, struct seen *sn,
			 const struct seen *h)
{
	for (unsigned k = 0; k < h->n; k++) {
		const struct member *m = &h->m[k];
		unsigned i = find_member(wk, sn, m);
		if (i < wk->ndirs) {
			memcpy(wk->dirs[i].id, m->id, 16);
			sn[i].matched = true;
		} else if (m->kind != K_EMPTY) {
			return missing(wk, sn, m);
		} else {
			wk_log(wk, 1, "--dir: %s (id %s) is no longer listed; "
			       "it held no shuffle logs", m->path,
			       hex(m->id).s);
		}
	}
	return 0;
}

/* A directory not in the home's marker: one of this worker's that left
 * the list empty, or a new one; never one with data of no marker. */
static int join(struct seen *s, struct wk_dir *d)
{
	if (s->marked) {
		memcpy(d->id, s->self, 16);
		return 0;
	}
	if (s->clog || s->logs)
		return wk_refuse(-EINVAL, "worker: --dir: %s holds %s but no "
				"%s: not this worker's (another worker's, of "
				"an earlier version?)", d->path,
				s->clog ? "a commit log" : "shuffle logs",
				WK_DIRID);
	return new_id(d->id);
}

/* A marked set: the home is the directory its markers name. */
static int marked_home(struct ush_worker *wk, struct seen *sn, unsigned any,
		       unsigned *home)
{
	const struct member *hm = NULL;
	for (unsigned k = 0; k < sn[any].n; k++)
		if (sn[any].m[k].kind == K_HOME)
			hm = &sn[any].m[k];
	*home = find_member(wk, sn, hm);
	if (*home == wk->ndirs)
		return missing(wk, sn, hm);
	if (!sn[*home].marked)
		return wk_refuse(-EINVAL, "worker: --dir: %s, this worker's "
				"home, has lost its %s: give each directory "
				"back its marker, or remove every directory's "
				"(docs/operations.md, \"Several disks\")",
				wk->dirs[*home].path, WK_DIRID);
	int ret = match_members(wk, sn, &sn[*home]);
	for (unsigned i = 0; !ret && i < wk->ndirs; i++)
		if (!sn[i].matched)
			ret = join(&sn[i], &wk->dirs[i]);
	for (unsigned i = 0; !ret && i < wk->ndirs; i++)
		for (unsigned j = 0; !ret && j < i; j++)
			if (!memcmp(wk->dirs[i].id, wk->dirs[j].id, 16))
				ret = wk_refuse(-EINVAL, "worker: --dir: %s "
						"and %s are one directory of "
						"this worker (id %s): is one a "
						"copy of the other?",
						wk->dirs[j].path,
						wk->dirs[i].path,
						hex(wk->dirs[i].id).s);
	return ret;
}

/* No marker anywhere: a new worker, or an earlier version's directories
 * (adopted), whose home is the one with the commit log. */
static int adopt(struct ush_worker *wk, const struct seen *sn,
		 unsigned *home)
{
	*home = wk->ndirs;
	for (unsigned i = 0; i < wk->ndirs; i++) {
		if (!sn[i].clog)
			continue;
		if (*home < wk->ndirs)
			return wk_refuse(-EINVAL, "worker: --dir: %s and %s "
					"both hold a commit log: the "
					"directories of two workers, not one",
					wk->dirs[*home].path, wk->dirs[i].path);
		*home = i;
	}
	for (unsigned i = 0; *home == wk->ndirs && i < wk->ndirs; i++)
		if (sn[i].logs)
			return wk_refuse(-EINVAL, "worker: --dir=%s: %s holds "
					"shuffle logs but no directory listed "
					"holds their commit log (" WK_LOG_FILE "): "
					"the home directory is missing from "
					"the list", wk->dirlist,
					wk->dirs[i].path);
	if (*home < wk->ndirs)
		wk_log(wk, 1, "--dir: adopting the directories of an earlier "
		       "version (no %s yet), home %s", WK_DIRID,
		       wk->dirs[*home].path);
	else
		*home = 0;
	int ret = new_id(wk->wid);
	for (unsigned i = 0; !ret && i < wk->ndirs; i++)
		ret = new_id(wk->dirs[i].id);
	return ret;
}

/* ----------------------------------------------------------- writing */

/* Whether d's marker holds the n bytes at b already. */
static bool unchanged(const struct wk_dir *d, const char *b, size_t n)
{
	char *old;
	size_t len = 0;
	const char *why;
	bool same = !load(d, &old, &len, &why) && old && len == n &&
		    !memcmp(old, b, n);
	ushi_free(old);
	return same;
}

/* The marker of d, as the worker's directories stand (and extra
 * recorded as holding logs), written whole or not at all; not at all
 * where it says so already (a restart with the same list needs no
 * space on a full disk). */
static int write_marker(struct ush_worker *wk, struct wk_dir *d,
			const struct wk_dir *extra)
{
	size_t cap = 128;
	for (unsigned i = 0; i < wk->ndirs; i++)
		cap += 48 + strlen(wk->dirs[i].path);
	char *b = ushi_malloc(cap);
	if (!b)
		return ushi_fail(-ENOMEM, "worker: allocation");
	size_t n = (size_t)snprintf(b, cap, MAGIC "\nworker %s\ndir %s\n",
				    hex(wk->wid).s, hex(d->id).s);
	for (unsigned i = 0; i < wk->ndirs; i++) {
		const struct wk_dir *m = &wk->dirs[i];
		enum kind k = !i ? K_HOME : atomic_load(&m->holds) ||
					    m == extra ? K_LOGS : K_EMPTY;
		size_t at = n;
		n += (size_t)snprintf(b + n, cap - n, "member %s %s %s\n",
				      hex(m->id).s, kinds[k], m->path);
		/* The path is for messages: one line. */
		for (; at < n - 1; at++)
			b[at] = b[at] == '\n' ? '?' : b[at];
	}
	n += (size_t)snprintf(b + n, cap - n, "crc32c %08x\n",
			      text_crc(b, n));
	if (unchanged(d, b, n)) {
		ushi_free(b);
		return 0;
	}
	int ret = ushi_replace_at(d->fd, WK_DIRID, b, n);
	ushi_free(b);
	return ret ? ushi_fail(ret, "worker: writing %s/%s: %s", d->path,
			       WK_DIRID, ush_strerror(ret)) : 0;
}

/* Home first in wk->dirs: the commit log's, and the marker that counts
 * (written first). */
static int publish(struct ush_worker *wk, const struct seen *sn,
		   unsigned home)
{
	for (unsigned i = 0; i < wk->ndirs; i++)
		atomic_store(&wk->dirs[i].holds, sn[i].logs || i == home);
	if (home) {
		struct wk_dir h = wk->dirs[home];
		memmove(wk->dirs + 1, wk->dirs, home * sizeof(h));
		wk->dirs[0] = h;
	}
	wk->dir = wk->dirs[0].path;
	int ret = 0;
	for (unsigned i = 0; !ret && i < wk->ndirs; i++)
		ret = write_marker(wk, &wk->dirs[i], NULL);
	return ret;
}

int wk_dirid_check(struct ush_worker *wk)
{
	struct seen *sn = ushi_calloc(wk->ndirs, sizeof(*sn));
	int ret = sn ? 0 : ushi_fail(-ENOMEM, "worker: allocation");
	for (unsigned i = 0; !ret && i < wk->ndirs; i++)
		ret = look(&wk->dirs[i], &sn[i]);
	unsigned home = 0;
	if (!ret)
		ret = one_worker(wk, sn);
	if (ret >= 0)
		ret = (unsigned)ret < wk->ndirs ?
			      marked_home(wk, sn, (unsigned)ret, &home) :
			      adopt(wk, sn, &home);
	if (!ret)
		ret = publish(wk, sn, home);
	for (unsigned i = 0; sn && i < wk->ndirs; i++) {
		ushi_free(sn[i].m);
		ushi_free(sn[i].buf);
	}
	ushi_free(sn);
	return ret;
}

int wk_dirid_hold(struct ush_worker *wk, struct wk_dir *d)
{
	if (atomic_load(&d->holds))
		return 0;
	pthread_mutex_lock(&wk->id_lock);
	int ret = atomic_load(&d->holds) ? 0 :
		  write_marker(wk, &wk->dirs[0], d);
	/* Set only once the home's marker says so on disk: a thread that
	 * sees it makes logs in d at once. */
	if (!ret)
		atomic_store(&d->holds, true);
	pthread_mutex_unlock(&wk->id_lock);
	return ret;
}
