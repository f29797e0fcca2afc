/* Buddy allocator over one arena; see pool.h. */
#include "core/pool.h"

#include <errno.h>
#include <sys/mman.h>

static size_t desc_index(const struct ushi_pool *p, const struct ushi_buf *b)
{
	return (size_t)(b - p->descs);
}

static void idle_push(struct ushi_pool *p, struct ushi_buf *b, unsigned order)
{
	b->order = (uint8_t)order;
	b->cap = USHI_BUF_MIN << order;
	b->state = BUF_IDLE;
	b->prev = NULL;
	b->next = p->idle[order];
	if (b->next)
		b->next->prev = b;
	p->idle[order] = b;
	p->idle_bytes += b->cap;
}

static void idle_unlink(struct ushi_pool *p, struct ushi_buf *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		p->idle[b->order] = b->next;
	if (b->next)
		b->next->prev = b->prev;
	b->next = b->prev = NULL;
	p->idle_bytes -= b->cap;
}

int pool_init(struct ushi_pool *p, size_t bytes, size_t max_cap)
{
	memset(p, 0, sizeof(*p));
	/* Bounded before any shift: classes are USHI_BUF_MIN << order. */
	if (max_cap < USHI_BUF_MIN ||
	    max_cap > (size_t)USHI_BUF_MIN << (USHI_POOL_ORDERS - 1) ||
	    (max_cap & (max_cap - 1)) || bytes < max_cap || bytes % max_cap)
		return -EINVAL;
	unsigned order = (unsigned)__builtin_ctzl(max_cap / USHI_BUF_MIN);
	p->arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p->arena == MAP_FAILED) {
		p->arena = NULL;
		return -errno;
	}
	madvise(p->arena, bytes, MADV_HUGEPAGE);
	size_t n = bytes / USHI_BUF_MIN;
	p->descs = ushi_calloc(n, sizeof(*p->descs));
	if (!p->descs) {
		munmap(p->arena, bytes);
		p->arena = NULL;
		return -ENOMEM;
	}
	p->bytes = bytes;
	p->max_order = order;
	for (size_t i = 0; i < n; i++)
		p->descs[i].data = p->arena + i * USHI_BUF_MIN;
	/* Push top-level blocks in reverse so the first get is at offset 0. */
	size_t step = (size_t)1 << order;
	for (size_t i = n; i >= step; i -= step)
		idle_push(p, &p->descs[i - step], order);
	return 0;
}

void pool_destroy(struct ushi_pool *p)
{
	if (p->arena)
		munmap(p->arena, p->bytes);
	ushi_free(p->descs);
	memset(p, 0, sizeof(*p));
}

int pool_order(const struct ushi_pool *p, size_t n)
{
	for (unsigned o = 0; o <= p->max_order; o++)
		if ((size_t)USHI_BUF_MIN << o >= n)
			return (int)o;
	return -1;
}

struct ushi_buf *pool_get(struct ushi_pool *p, unsigned order)
{
	unsigned o = order;
	while (o <= p->max_order && !p->idle[o])
		o++;
	if (o > p->max_order)
		return NULL;
	struct ushi_buf *b = p->idle[o];
	idle_unlink(p, b);
	/* Split down, leaving the upper halves idle. */
	while (o > order) {
		o--;
		idle_push(p, b + ((size_t)1 << o), o);
	}
	b->order = (uint8_t)order;
	b->cap = USHI_BUF_MIN << order;
	b->state = BUF_WRITER;
	b->len = b->nrec = 0;
	return b;
}

void pool_put(struct ushi_pool *p, struct ushi_buf *b)
{
	if (unlikely(b->state == BUF_IDLE || b->state == BUF_NONE))
		ushi_panic("buffer %p released twice", (void *)b->data);
	unsigned o = b->order;
	size_t i = desc_index(p, b);
	/* Merge with free buddies as far as possible. */
	while (o < p->max_order) {
		size_t bi = i ^ ((size_t)1 << o);
		struct ushi_buf *buddy = &p->descs[bi];
		if (buddy->state != BUF_IDLE || buddy->order != o)
			break;
		idle_unlink(p, buddy);
		buddy->state = BUF_NONE;
		p->descs[i].state = BUF_NONE;
		i &= ~((size_t)1 << o);
		o++;
	}
	idle_push(p, &p->descs[i], o);
}

struct ushi_buf *pool_lookup(struct ushi_pool *p, const void *ptr)
{
	const uint8_t *u = ptr;
	if (unlikely(!p->arena || u < p->arena || u >= p->arena + p->bytes ||
		     (size_t)(u - p->arena) % USHI_BUF_MIN))
		ushi_panic("%p is not a pool buffer", ptr);
	struct ushi_buf *b = &p->descs[(size_t)(u - p->arena) / USHI_BUF_MIN];
	if (unlikely(b->state == BUF_NONE || b->state == BUF_IDLE))
		ushi_panic("buffer %p is not owned by anyone (released or "
			  "never acquired)", ptr);
	return b;
}
