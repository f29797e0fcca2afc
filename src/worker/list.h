/* Intrusive lists of the worker's objects. */
#ifndef USHI_WK_LIST_H
#define USHI_WK_LIST_H

#include <stddef.h>

/* An intrusive doubly-linked list (NULL-terminated; the owner knows
 * whether a node is on it). */
struct wk_link {
	struct wk_link *prev, *next;
};

struct wk_list {
	struct wk_link *head, *tail;
};

static inline void wk_list_add(struct wk_list *l, struct wk_link *n)
{
	n->next = NULL;
	n->prev = l->tail;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

static inline void wk_list_del(struct wk_list *l, struct wk_link *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

/* The struct whose link `field` is at link. */
#define WK_OF(link, type, field)                                             \
	((type *)(void *)((char *)(link) - offsetof(type, field)))

#endif
