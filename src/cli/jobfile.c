/*
 * The command line and INI job files (libinih) -> a list of jobs.
 *
 * Precedence, lowest first: the table's defaults, a file's [global]
 * section (for the jobs after it in that file, as in fio), the job's own
 * section, then the command line, which overrides every job. Without a
 * job file the command line describes one job.
 */
#include "cli.h"

#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* inih calls its handler only for keys; the line reader below injects
 * this key after every section header so that empty sections count. */
#define SECTION_MARK "@section"
/* The value the line reader gives a bare flag (fio's "group_reporting"
 * on a line of its own): no file can hold it, as it is a control byte. */
#define BARE_FLAG "\x01"
/* fio's include: files that include files, this deep at most. */
#define INCLUDE_MAX 8

/* One open file: the job file, or one it includes. */
struct ini_input {
	char *file;        /* as the messages name it */
	FILE *fp;
	int line;          /* physical line of the last chunk read */
	bool line_done;    /* that chunk ended its line */
};

/* Where inih's n-th line came from. */
struct ini_origin {
	const char *file;
	int line;
};

struct ini_state {
	struct ini_input in[INCLUDE_MAX + 1];
	unsigned depth;    /* in[depth] is read */
	char **names;      /* every file opened, for the messages */
	size_t nnames;
	const char *file;  /* of the last line read */
	int line;
	bool mark_due;     /* a section header was just read */
	struct ini_origin *phys; /* inih's line numbers -> file:line */
	size_t nphys, cap;
	struct job_list *l;
	struct job_opts global; /* this file's [global] so far */
	long cur;          /* index of the job being read; -1 in [global] */
	char err[768];     /* the first error */
};

static void usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static void usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs(CLI_NAME ": ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int push_line(struct ini_state *s)
{
	if (s->nphys == s->cap) {
		size_t c = s->cap ? 2 * s->cap : 256;
		struct ini_origin *p = realloc(s->phys, c * sizeof(*p));
		if (!p)
			return -1;
		s->phys = p;
		s->cap = c;
	}
	s->phys[s->nphys++] = (struct ini_origin){s->file, s->line};
	return 0;
}

static void set_err(struct ini_state *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void set_err(struct ini_state *s, const char *fmt, ...)
{
	va_list ap;
	if (s->err[0])
		return; /* the first error only */
	va_start(ap, fmt);
	vsnprintf(s->err, sizeof(s->err), fmt, ap);
	va_end(ap);
}

/* Opens file ("-": standard input) as in[depth]; 0 or -errno. */
static int open_input(struct ini_state *s, unsigned depth, const char *file)
{
	bool in = !strcmp(file, "-");
	FILE *fp = in ? stdin : fopen(file, "r");
	if (!fp)
		return -errno;
	char *name = strdup(in ? "<stdin>" : file);
	char **names = realloc(s->names, (s->nnames + 1) * sizeof(*names));
	if (names)
		s->names = names;
	if (!name || !names) {
		free(name);
		if (fp != stdin)
			fclose(fp);
		return -ENOMEM;
	}
	s->names[s->nnames++] = name;
	s->in[depth] = (struct ini_input){.file = name, .fp = fp};
	s->depth = depth;
	return 0;
}

static void close_input(struct ini_input *in)
{
	if (in->fp && in->fp != stdin)
		fclose(in->fp);
	in->fp = NULL;
}

/* fio's "include FILE": a relative FILE is found beside the file that
 * includes it. Opens it as the next input; a blank line stands for the
 * include line. */
static void include_file(struct ini_state *s, const char *arg)
{
	char path[PATH_MAX];
	const char *cur = s->in[s->depth].file;
	const char *slash = strrchr(cur, '/');
	size_t n = strcspn(arg, " \t\r\n;#");
	const char *rest = arg + n + strspn(arg + n, " \t\r\n");
	if (!n || (*rest && !strchr(";#", *rest))) {
		size_t len = strcspn(arg, "\r\n;#");
		while (len && strchr(" \t", arg[len - 1]))
			len--;
		set_err(s, "%s:%d: include %.*s: not one file name; "
			"accepted: include FILE", s->file, s->line, (int)len,
			arg);
		return;
	}
	if (*arg == '/' || !slash || s->in[s->depth].fp == stdin)
		snprintf(path, sizeof(path), "%.*s", (int)n, arg);
	else
		snprintf(path, sizeof(path), "%.*s/%.*s", (int)(slash - cur),
			 cur, (int)n, arg);
	if (s->depth == INCLUDE_MAX) {
		set_err(s, "%s:%d: include %s: files included %d deep (one "
			"includes itself?); accepted: at most %d", s->file,
			s->line, path, INCLUDE_MAX + 1, INCLUDE_MAX);
		return;
	}
	int ret = open_input(s, s->depth + 1, path);
	if (ret)
		set_err(s, "%s:%d: include %s: cannot read it: %s", s->file,
			s->line, path, strerror(-ret));
}

/* fio's ${VAR} in a value: the environment's VAR, empty if unset. Expands
 * str (num bytes) in place; false if the line grows too long. */
static bool expand_env(char *str, int num)
{
	char out[INI_MAX_LINE * 4], *eq = strchr(str, '=');
	size_t k = 0;
	if (!eq || !strstr(eq, "${"))
		return true;
	k = (size_t)(eq + 1 - str);
	memcpy(out, str, k);
	for (const char *p = eq + 1; *p && k < sizeof(out);) {
		const char *end = p[0] == '$' && p[1] == '{' ? strchr(p, '}')
							     : NULL;
		if (!end) {
			out[k++] = *p++;
			continue;
		}
		char name[INI_MAX_LINE];
		snprintf(name, sizeof(name), "%.*s", (int)(end - p - 2), p + 2);
		const char *v = getenv(name);
		k += (size_t)snprintf(out + k, sizeof(out) - k, "%s",
				      v ? v : "");
		p = end + 1;
	}
	if (k >= (size_t)num)
		return false;
	memcpy(str, out, k);
	str[k] = '\0';
	return true;
}

/* Turns a bare flag ("stonewall", perhaps with a comment) into
 * "stonewall=" BARE_FLAG; leaves other lines to inih. */
static void bare_flag(char *str, int num)
{
	size_t n = strcspn(str, " \t\r\n;#=:[");
	const char *rest = str + n + strspn(str + n, " \t\r\n");
	if (!n || (*rest && !strchr(";#", *rest)) ||
	    n + sizeof("=" BARE_FLAG "\n") > (size_t)num)
		return;
	memcpy(str + n, "=" BARE_FLAG "\n", sizeof("=" BARE_FLAG "\n"));
}

/* inih's line reader: the open inputs, innermost first, each line with
 * its leading blanks removed (fio has no continuation lines), fio's
 * include, bare flags and ${VAR} done here. */
static char *ini_read(char *str, int num, void *stream)
{
	struct ini_state *s = stream;
	struct ini_input *in;
	if (s->mark_due) {
		s->mark_due = false;
		snprintf(str, (size_t)num, SECTION_MARK "=\n");
		return push_line(s) ? NULL : str;
	}
	for (;;) {
		in = &s->in[s->depth];
		if (fgets(str, num, in->fp))
			break;
		if (ferror(in->fp) || !s->depth)
			return NULL;
		close_input(in);
		s->depth--;
	}
	if (in->line_done || !in->line)
		in->line++;
	s->file = in->file;
	s->line = in->line;
	in->line_done = strchr(str, '\n') != NULL;
	if (!in->line_done && !feof(in->fp)) {
		set_err(s, "%s:%d: line longer than %d bytes", s->file,
			s->line, num - 2);
		int c;
		while ((c = fgetc(in->fp)) != EOF && c != '\n')
			;
		in->line_done = true;
		snprintf(str, (size_t)num, "\n");
	}
	char *p = str;
	if (in->line == 1 && !strncmp(p, "\xEF\xBB\xBF", 3))
		p += 3; /* a UTF-8 BOM, which inih skips too */
	p += strspn(p, " \t");
	memmove(str, p, strlen(p) + 1);
	s->mark_due = str[0] == '[';
	if (!strncmp(str, "include", 7) && strchr(" \t", str[7])) {
		include_file(s, str + 8 + strspn(str + 8, " \t"));
		snprintf(str, (size_t)num, "\n");
	} else if (!expand_env(str, num)) {
		set_err(s, "%s:%d: line longer than %d bytes once ${...} "
			"is expanded", s->file, s->line, num - 2);
		snprintf(str, (size_t)num, "\n");
	} else if (!s->mark_due && !strchr(";#", str[0])) {
		bare_flag(str, num);
	}
	return push_line(s) ? NULL : str;
}

static bool valid_job_name(const char *n)
{
	if (!isalnum((unsigned char)*n))
		return false;
	for (; *n; n++)
		if (!isalnum((unsigned char)*n) && !strchr("_-.", *n))
			return false;
	return true;
}

static void start_section(struct ini_state *s, const char *section)
{
	struct job_list *l = s->l;
	if (!strcmp(section, "global")) {
		s->cur = -1;
		return;
	}
	if (!valid_job_name(section) ||
	    strlen(section) >= sizeof(l->jobs->name)) {
		snprintf(s->err, sizeof(s->err), "%s:%d: section [%s]: not a "
			 "job name; accepted: [global] or [NAME], NAME of at "
			 "most 127 letters, digits, '_', '-' or '.'", s->file,
			 s->line, section);
		return;
	}
	struct job_opts *j = realloc(l->jobs, (l->n + 1) * sizeof(*j));
	if (!j) {
		snprintf(s->err, sizeof(s->err), "out of memory");
		return;
	}
	l->jobs = j;
	j[l->n] = s->global;
	j[l->n].given = 0; /* [global]'s are not this job's own */
	snprintf(j[l->n].name, sizeof(j->name), "%s", section);
	s->cur = (long)l->n++;
}

static int on_key(void *user, const char *section, const char *key,
		  const char *value)
{
	struct ini_state *s = user;
	char why[512], kv[256];
	if (s->err[0])
		return 1; /* report the first error only */
	if (!strcmp(key, SECTION_MARK)) {
		start_section(s, section);
		return !s->err[0];
	}
	bool bare = !strcmp(value, BARE_FLAG);
	/* the setting as the file wrote it, for the messages */
	snprintf(kv, sizeof(kv), "%s%s%s", key, bare ? "" : "=",
		 bare ? "" : value);
	const struct opt *o = opt_find(key);
	if (!*section)
		set_err(s, "%s:%d: %s: key outside a section; accepted: keys "
			"under [global] or [JOBNAME]", s->file, s->line, kv);
	else if (opt_refused(key))
		set_err(s, "%s:%d: %s: %s", s->file, s->line, kv,
			opt_refused(key));
	else if (!o && opt_suggest(key))
		set_err(s, "%s:%d: %s: unknown key (did you mean %s?); "
			"accepted: the option names that --help lists, "
			"without the dashes", s->file, s->line, kv,
			opt_suggest(key));
	else if (!o)
		set_err(s, "%s:%d: %s: unknown key; accepted: the option names "
			"that --help lists, without the dashes", s->file,
			s->line, kv);
	else if ((o->flags & OPT_GLOBAL) && s->cur >= 0)
		set_err(s, "%s:%d: %s: a global option; accepted: in [global] "
			"or on the command line", s->file, s->line, kv);
	else if (opt_set(o, o->flags & OPT_GLOBAL ? &s->l->global :
			 s->cur < 0 ? &s->global : &s->l->jobs[s->cur],
			 bare ? NULL : value, why, sizeof(why)))
		set_err(s, "%s:%d: %s: %s", s->file, s->line, kv, why);
	return !s->err[0];
}

/* Adds the jobs of one file ("-": standard input) to l; returns 0 or -1
 * after a message. */
static int parse_file(struct job_list *l, const char *file,
		      struct job_opts *global)
{
	struct ini_state s = {.l = l, .cur = -1};
	opts_defaults(&s.global);
	int ret = open_input(&s, 0, file);
	if (ret) {
		usage_error("%s: cannot read the job file: %s", file,
			    strerror(-ret));
		return -1;
	}
	ret = ini_parse_stream(ini_read, &s, on_key, &s);
	int rerr = ferror(s.in[s.depth].fp) ? errno : 0;
	const char *rfile = s.in[s.depth].file;
	if (rerr)
		usage_error("%s: cannot read the job file: %s", rfile,
			    strerror(rerr));
	else if (ret > 0 && !s.err[0] && (size_t)ret <= s.nphys)
		usage_error("%s:%d: syntax error; accepted: [SECTION], "
			    "KEY=VALUE, a flag alone (time_based), "
			    "include FILE or a comment",
			    s.phys[ret - 1].file, s.phys[ret - 1].line);
	else if (s.err[0] || ret)
		usage_error("%s", s.err[0] ? s.err : "out of memory");
	for (unsigned i = 0; i <= s.depth; i++)
		close_input(&s.in[i]);
	for (size_t i = 0; i < s.nnames; i++)
		free(s.names[i]);
	free(s.names);
	free(s.phys);
	*global = s.global;
	return rerr || ret || s.err[0] ? -1 : 0;
}

/* Each directory of --dir, where the job writes (disk spills, manifests,
 * an embedded worker's storage), must exist: the job creates nothing
 * outside them. */
static int check_dir(const struct job_opts *j, const char *pre)
{
	struct stat st;
	char d[PATH_MAX], what[2 * PATH_MAX + 16];
	bool used = j->target == TARGET_DISK ||
		    (j->target == TARGET_NET &&
		     (!j->workers[0] || j->rw != RW_SHUFFLE || job_keeps(j)));
	unsigned n = job_dir(j, 0, d, sizeof(d));
	for (unsigned i = 0; used && i < n; i++) {
		job_dir(j, i, d, sizeof(d));
		/* one of a list is named after the list */
		snprintf(what, sizeof(what), n > 1 && *d ? "--dir=%s: %s" :
			 "--dir=%s", j->dir, d);
		if (!*d)
			usage_error("%s%s: an empty directory in the list "
				    "(directories are separated by ':'); "
				    "accepted: DIR[:DIR...]", pre, what);
		else if (stat(d, &st))
			usage_error("%s%s: %s; accepted: an existing directory "
				    "(the job creates nothing outside it)", pre,
				    what, strerror(errno));
		else if (!S_ISDIR(st.st_mode))
			usage_error("%s%s: not a directory; accepted: an "
				    "existing directory", pre, what);
		else if (access(d, W_OK | X_OK) && j->rw != RW_READ)
			usage_error("%s%s: %s; accepted: a directory this user "
				    "may write in", pre, what, strerror(errno));
		else
			continue;
		return -1;
	}
	return 0;
}

/* --cpus_allowed: fio's CPU list. Returns 0, or -1 after a message. */
static int check_cpus(const struct job_opts *j, const char *pre)
{
	const char *at;
	if (!cpu_list(j->cpus_allowed, NULL, &at))
		return 0;
	usage_error("%s--cpus_allowed=%s: not a CPU list at '%s'; accepted: "
		    "N or N-M, comma-separated, each below %d", pre,
		    j->cpus_allowed, at, CPU_LIST_MAX);
	return -1;
}

/* Cross-option checks of a finished job; one message naming the option. */
static int check_job(const struct job_opts *j, bool named)
{
	char pre[160] = "", v[64];
	if (named)
		snprintf(pre, sizeof(pre), "job '%s': ", j->name);
	if (j->rw == RW_READ && j->target == TARGET_NULL) {
		usage_error("%s--rw=read with --target=null: the null target "
			    "keeps nothing to read back; accepted: --rw=read "
			    "with --target=disk or --target=net", pre);
		return -1;
	}
	if (j->workers[0] && j->target != TARGET_NET) {
		usage_error("%s--workers=%s: used only by --target=net, and "
			    "this job's target is %s; accepted: --workers with "
			    "--target=net", pre, j->workers,
			    j->target == TARGET_DISK ? "disk" : "null");
		return -1;
	}
	if (j->workers[0] && ush_workers_check(j->workers, 1) < 0) {
		usage_error("%s--workers=%s: %s", pre, j->workers,
			    ush_last_error());
		return -1;
	}
	if (j->app[strspn(j->app, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
			  "qrstuvwxyz0123456789._:-")]) {
		usage_error("%s--app=%s: not an application id; accepted: 1..64 "
			    "characters of A-Z a-z 0-9 . _ : -", pre, j->app);
		return -1;
	}
	if (j->keep && j->unlink == 1) {
		usage_error("%s--keep with --unlink=1: one keeps the output, the "
			    "other removes it; accepted: one of them", pre);
		return -1;
	}
	if (j->hold_ms && (j->target != TARGET_NET || !j->workers[0] ||
			   !job_keeps(j))) {
		usage_error("%s--hold=%llu: holds a kept output on --workers, "
			    "and this job %s; accepted: --hold with "
			    "--target=net --workers=HOST:PORT,... in a job "
			    "that keeps its output (--rw=write, --rw=read or "
			    "--keep)",
			    pre, (unsigned long long)(j->hold_ms / 1000),
			    !job_keeps(j) ? "keeps none (a shuffle removes "
			    "its output)" : "has no --workers (its embedded "
			    "worker ends with the process)");
		return -1;
	}
	if (check_dir(j, pre) || check_cpus(j, pre))
		return -1;
	opt_format(opt_find("record-size"), j, v, sizeof(v));
	if (j->verify == VERIFY_CRC32C && j->rw != RW_READ &&
	    j->record_size[0] < REC_HDR) {
		usage_error("%s--record-size=%s: --verify=crc32c needs records "
			    "of at least %u bytes; accepted: %u or more, or "
			    "--verify=none", pre, v, REC_HDR, REC_HDR);
		return -1;
	}
	if (j->rw != RW_READ && !j->record_size[1]) {
		usage_error("%s--record-size=%s: empty records never add up "
			    "to --size; accepted: a MAX of 1 byte or more", pre,
			    v);
		return -1;
	}
	if (j->time_based && !j->runtime_ms) {
		usage_error("%s--time_based: needs --runtime; accepted: "
			    "--time_based with --runtime=SECONDS", pre);
		return -1;
	}
	return 0;
}

/* Returns 1 after --help/--version, 0 to go on, -1 after a message.
 * As in fio, each --name starts a job; *named counts them. */
static int scan_argv(int argc, char **argv, struct job_list *l,
		     const char ***files, size_t *nfiles, int *named)
{
	struct job_opts scratch;
	char key[64], why[512];
	opts_defaults(&scratch);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			opts_help(stdout);
			return 1;
		}
		if (!strcmp(a, "--version")) {
			printf(CLI_NAME "-" USH_VERSION_STRING "\n");
			return 1;
		}
		if (a[0] != '-' || !a[1]) {
			(*files)[(*nfiles)++] = a;
			continue;
		}
		const char *eq = strchr(a, '=');
		size_t k = eq ? (size_t)(eq - a) : strlen(a);
		snprintf(key, sizeof(key), "%.*s", (int)k, a);
		const struct opt *o = a[1] == '-' ? opt_find(key + 2) : NULL;
		const char *no = a[1] == '-' ? opt_refused(key + 2) : NULL;
		if (no) {
			usage_error("%s: %s", a, no);
			return -1;
		}
		if (!o) {
			const char *near = opt_suggest(key + (a[1] == '-'
								   ? 2 : 1));
			char hint[96] = "";
			if (near)
				snprintf(hint, sizeof(hint), " (did you mean "
					 "--%s?)", near);
			usage_error("%s: unknown option%s; accepted: the options "
				    "that " CLI_NAME " --help lists, as "
				    "--NAME=VALUE", a, hint);
			return -1;
		}
		const char *v = eq ? eq + 1 : NULL;
		if (opt_set(o, &scratch, v, why, sizeof(why))) {
			usage_error("%s: %s", a, why);
			return -1;
		}
		if (o->off == offsetof(struct job_opts, name))
			(*named)++;
		l->given[l->ngiven++] = (struct cli_setting){
			o, v ? v : "1",
			o->flags & OPT_GLOBAL ? -1 : *named - 1};
	}
	return 0;
}

/* Applies the command-line settings of job k (-1: those before the first
 * --name, which every job takes, as fio's global options) to o. */
static void apply_given(const struct job_list *l, int k, struct job_opts *o)
{
	char why[512];
	uint64_t own = o->given;
	for (size_t g = 0; g < l->ngiven; g++)
		if (l->given[g].job == k)
			opt_set(l->given[g].o, o, l->given[g].value, why,
				sizeof(why)); /* checked in scan_argv */
	if (k < 0)
		o->given = own;
}

/* Adds the command line's jobs after the files': each from the defaults,
 * the settings before the first --name, then its own. With neither
 * files nor --name, the command line is one job over base. */
static int add_cli_jobs(struct job_list *l, int named,
			const struct job_opts *base)
{
	size_t n = l->n + (size_t)named + (!l->n && !named);
	struct job_opts *j = realloc(l->jobs, n * sizeof(*j));
	if (!j)
		return -1;
	l->jobs = j;
	if (!l->n && !named) {
		j[l->n] = *base;
		j[l->n++].given = 0; /* all of it is global, in fio's terms */
		apply_given(l, -1, &j[0]);
	}
	for (int k = 0; k < named; k++) {
		opts_defaults(&j[l->n]);
		apply_given(l, -1, &j[l->n]);
		apply_given(l, k, &j[l->n++]);
	}
	return 0;
}

/* A job with --loops=N becomes N jobs, run one after another on one
 * thread (main.c), each with its own report block. Returns 0 or -1. */
static int expand_loops(struct job_list *l)
{
	size_t n = 0;
	for (size_t i = 0; i < l->n; i++)
		n += (size_t)l->jobs[i].loops;
	if (n == l->n)
		return 0;
	struct job_opts *j = malloc(n * sizeof(*j));
	if (!j)
		return -1;
	for (size_t i = 0, k = 0; i < l->n; i++)
		for (int loop = 0; loop < (int)l->jobs[i].loops; loop++) {
			j[k] = l->jobs[i];
			j[k++].loop = loop;
		}
	free(l->jobs);
	l->jobs = j;
	l->n = n;
	return 0;
}

/*
 * Jobs of one group run at the same time, so they must not share what a
 * job owns: its shuffle (its id comes from its name) and an embedded
 * worker's storage kept in --dir. Numbers the groups; -1 after a message.
 */
static int check_groups(struct job_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		const struct job_opts *a = &l->jobs[i];
		l->group[i] = i ? l->group[i - 1] + (a->stonewall && !a->loop)
			      : 0;
		/* a's earlier loops run before it, on its thread */
		for (size_t k = i - (size_t)a->loop;
		     k-- > 0 && l->group[k] == l->group[i];) {
			const struct job_opts *b = &l->jobs[k];
			bool embeds = a->target == TARGET_NET &&
				      b->target == TARGET_NET &&
				      !a->workers[0] && !b->workers[0] &&
				      job_keeps(a) && job_keeps(b) &&
				      !strcmp(a->dir, b->dir);
			if (strcmp(a->name, b->name) && !embeds)
				continue;
			usage_error("jobs '%s' and '%s' run at the same time "
				    "and would share %s; accepted: --stonewall "
				    "(stonewall=1) on the second, or another "
				    "%s", b->name, a->name, embeds ?
				    "the embedded worker's storage in --dir" :
				    "a shuffle (its id comes from the name)",
				    embeds ? "--dir" : "--name");
			return -1;
		}
	}
	return 0;
}

int cli_parse(int argc, char **argv, struct job_list *l)
{
	const char **files = calloc((size_t)argc + 1, sizeof(*files));
	size_t nfiles = 0;
	int named = 0;
	memset(l, 0, sizeof(*l));
	opts_defaults(&l->global);
	l->given = calloc((size_t)argc + 1, sizeof(*l->given));
	if (!files || !l->given) {
		free(files);
		usage_error("out of memory");
		return EXIT_USAGE;
	}
	int ret = scan_argv(argc, argv, l, &files, &nfiles, &named);
	struct job_opts global = l->global;
	for (size_t i = 0; !ret && i < nfiles; i++)
		ret = parse_file(l, files[i], &global);
	if (!ret && nfiles && !l->n && !named) {
		/* fio's words and status: a file of [global] only, or
		 * nothing, is not the default job */
		usage_error("No job(s) defined in %s%s: only [global] or "
			    "nothing; accepted: a [JOBNAME] section per job, "
			    "or --name=JOBNAME", strcmp(files[0], "-") ?
			    files[0] : "<stdin>", nfiles > 1 ?
			    " and the other job files" : "");
		ret = 2;
	}
	free(files);
	size_t from_files = l->n;
	/* Jobs from sections or --name: say which failed. */
	bool name_them = l->n > 0 || named > 1;
	for (size_t j = 0; !ret && j < from_files; j++)
		apply_given(l, -1, &l->jobs[j]);
	if (!ret && add_cli_jobs(l, named, &global))
		usage_error("out of memory"), ret = -1;
	apply_given(l, -1, &l->global);
	if (l->global.minimal)
		l->global.output_format = OUT_TERSE;
	for (size_t j = 0; !ret && j < l->n; j++) {
		struct job_opts *o = &l->jobs[j];
		if (!o->numjobs)
			o->numjobs = (uint64_t)sysconf(_SC_NPROCESSORS_ONLN);
		if (check_job(o, name_them))
			ret = -1;
	}
	if (!ret && (expand_loops(l) ||
		     !(l->group = calloc(l->n, sizeof(*l->group)))))
		usage_error("out of memory"), ret = -1;
	if (!ret)
		ret = check_groups(l);
	if (ret) {
		job_list_free(l);
		return ret == 2 ? EXIT_RUN : ret > 0 ? 0 : EXIT_USAGE;
	}
	return 0;
}

void job_list_free(struct job_list *l)
{
	free(l->jobs);
	free(l->group);
	free(l->given);
	memset(l, 0, sizeof(*l));
}
