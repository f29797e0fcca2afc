/* Log-linear latency histogram; see ush_lat in ushuffle.h. */
#include "core/internal.h"

#include <math.h>

#define SUB_BITS 4
#define SUB (1u << SUB_BITS)
#define EXACT (2 * SUB) /* values below are their own bucket */

_Static_assert(EXACT + (63 - SUB_BITS) * SUB == USH_LAT_BUCKETS,
	       "bucket count");

static unsigned bucket_of(uint64_t v)
{
	if (v < EXACT)
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v); /* e > SUB_BITS */
	unsigned sub = (unsigned)(v >> (e - SUB_BITS)) & (SUB - 1);
	return EXACT + (e - SUB_BITS - 1) * SUB + sub;
}

/* Midpoint of bucket b's value range. */
static uint64_t bucket_mid(unsigned b)
{
	if (b < EXACT)
		return b;
	unsigned e = (b - EXACT) / SUB + SUB_BITS + 1;
	uint64_t sub = (b - EXACT) % SUB;
	uint64_t lo = (1ull << e) | (sub << (e - SUB_BITS));
	return lo + (1ull << (e - SUB_BITS)) / 2;
}

void ush_lat_init(struct ush_lat *l)
{
	memset(l, 0, sizeof(*l));
	l->min_ns = UINT64_MAX;
}

void ush_lat_add(struct ush_lat *l, uint64_t ns)
{
	l->count++;
	l->min_ns = ns < l->min_ns ? ns : l->min_ns;
	l->max_ns = ns > l->max_ns ? ns : l->max_ns;
	l->sum_ns += (double)ns;
	l->sumsq_ns += (double)ns * (double)ns;
	l->bucket[bucket_of(ns)]++;
}

void ush_lat_merge(struct ush_lat *d, const struct ush_lat *s)
{
	if (!s->count)
		return;
	d->count += s->count;
	d->min_ns = s->min_ns < d->min_ns ? s->min_ns : d->min_ns;
	d->max_ns = s->max_ns > d->max_ns ? s->max_ns : d->max_ns;
	d->sum_ns += s->sum_ns;
	d->sumsq_ns += s->sumsq_ns;
	for (unsigned i = 0; i < USH_LAT_BUCKETS; i++)
		d->bucket[i] += s->bucket[i];
}

uint64_t ush_lat_percentile(const struct ush_lat *l, double pct)
{
	if (!l->count)
		return 0;
	uint64_t rank = (uint64_t)ceil(pct / 100.0 * (double)l->count);
	rank = rank < 1 ? 1 : rank;
	uint64_t seen = 0;
	for (unsigned b = 0; b < USH_LAT_BUCKETS; b++) {
		seen += l->bucket[b];
		if (seen >= rank) {
			uint64_t v = bucket_mid(b);
			return v < l->min_ns ? l->min_ns
					     : v > l->max_ns ? l->max_ns : v;
		}
	}
	return l->max_ns;
}

double ush_lat_mean(const struct ush_lat *l)
{
	return l->count ? l->sum_ns / (double)l->count : 0.0;
}

double ush_lat_stdev(const struct ush_lat *l)
{
	if (l->count < 2)
		return 0.0;
	double m = ush_lat_mean(l);
	double var = l->sumsq_ns / (double)l->count - m * m;
	return var > 0 ? sqrt(var) : 0.0;
}
