/*
 * Key files for sealed frames (docs/security.md, "Key files"): read as
 * secret files are (regular files only, never half of a file being
 * rewritten), then parsed line by line. Every rejection names the file
 * and the line.
 */
#include "net/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

/* Room for USH_SEAL_KEYS_MAX keys and comments around them. */
#define KEY_FILE_MAX 8192

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* One key line (NUL-terminated, no newline) into k: 0 or a reason. */
static const char *parse_line(char *line, struct ush_seal_key *k)
{
	char *hex = line, *sp = strchr(line, ' ');
	k->id = 0;
	if (sp) {
		char *end;
		errno = 0;
		unsigned long long id = strtoull(line, &end, 10);
		if (end != sp || line[0] < '0' || line[0] > '9' || errno ||
		    id > UINT32_MAX)
			return "the key id before the space is not a decimal "
			       "number 0..4294967295";
		k->id = (uint32_t)id;
		hex = sp + 1;
	}
	if (strlen(hex) != 2 * USH_SEAL_KEY_SIZE)
		return "a key is 64 hex digits (32 bytes: openssl rand -hex "
		       "32), optionally after 'ID '";
	for (unsigned i = 0; i < USH_SEAL_KEY_SIZE; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return "a key holds a character that is not a hex digit";
		k->key[i] = (unsigned char)(hi << 4 | lo);
	}
	return NULL;
}

/* Parses the file's text: the number of keys, or -EINVAL naming the
 * line. */
static int parse(const char *path, char *text, struct ush_seal_key *keys,
		 uint32_t max)
{
	uint32_t n = 0, lineno = 0;
	for (char *line = text, *next; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		lineno++;
		size_t len = strlen(line);
		if (len && line[len - 1] == '\r')
			line[--len] = 0;
		if (!len || line[0] == '#')
			continue;
		struct ush_seal_key k;
		const char *why = n == max ? "more keys than the caller has "
					     "room for" : parse_line(line, &k);
		for (uint32_t i = 0; !why && i < n; i++)
			if (keys[i].id == k.id)
				why = "a key id given twice";
		explicit_bzero(line, len);
		if (why)
			return ushi_fail(-EINVAL, "seal: key file %s line %u: %s",
					path, lineno, why);
		keys[n++] = k;
		explicit_bzero(&k, sizeof(k));
	}
	if (!n)
		return ushi_fail(-EINVAL, "seal: key file %s holds no key",
				path);
	return (int)n;
}

int ush_seal_keys_load(const char *path, struct ush_seal_key *keys,
		       uint32_t max)
{
	if (!path || !keys || !max)
		return ushi_fail(-EINVAL, "seal: no key file, or no room for "
				"its keys");
	/* Room for the longest file, one byte more (a file that fills it
	 * is too long) and a NUL. */
	char text[KEY_FILE_MAX + 2];
	bool loose;
	int n = auth_read_file(AT_FDCWD, path, false, (uint8_t *)text,
			       KEY_FILE_MAX + 1, &loose, "seal: key file");
	if (n == KEY_FILE_MAX + 1)
		n = ushi_fail(-EINVAL, "seal: key file %s is longer than %u "
			      "bytes", path, KEY_FILE_MAX);
	if (n >= 0) {
		text[n] = 0;
		if (memchr(text, 0, (size_t)n))
			n = ushi_fail(-EINVAL, "seal: key file %s holds a NUL "
				      "byte: not a text key file", path);
	}
	if (n >= 0)
		n = parse(path, text, keys, max);
	if (n > 0 && loose)
		ushi_warn("seal: key file %s is readable by group or others: "
			  "chmod 600 it", path);
	explicit_bzero(text, sizeof(text));
	return n;
}
