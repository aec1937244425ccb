/* Gives back the untouched tail of mimalloc's pages that live objects keep.
 *
 * mimalloc extends a page's free list a few KiB at a time as it is used and
 * never takes a page back while one block in it is alive. A burst (10,000
 * connections opened, then closed) extends the pages where the broker's
 * long-lived objects sit to their full 64 KiB; when the burst is over those
 * pages hold a handful of objects at their start and ~60 KiB of free blocks
 * that stay resident for good (benches/README.md, "A burst's pages given
 * back").
 *
 * wharf_mi_trim_pages() runs on an idle thread, over the pages that thread's
 * default heap owns: for each page whose free blocks past its last live one
 * fill at least one OS page, it takes those blocks off the free list, lowers
 * the page's capacity to match (so the page extends again, touching fresh
 * zeroed memory, when it is next used) and gives the memory back with
 * madvise(MADV_DONTNEED). Only blocks on the owning thread's own free list
 * are dropped: a block another thread is freeing at that moment is still
 * counted as used, so it lies below the new capacity.
 *
 * It is compiled against the headers of the mimalloc the binary links
 * (libmimalloc-sys exports their directory), with the library's own
 * defines (build.rs), so the page layout it reads is the library's.
 */
#include "mimalloc.h"
#include "mimalloc/internal.h"
#include "mimalloc/prim.h"

#include <string.h>
#include <sys/mman.h>

/* The page and heap layout read here is v3.3.2's (libmimalloc-sys
 * 0.1.49, pinned in Cargo.toml); another version is refused at build
 * time, and wharf_mi_trim_check() refuses a library built with other
 * layout-changing options. */
#if MI_MALLOC_VERSION != 30302
#error "src/alloc_trim.c reads mimalloc v3.3.2's pages: check it against this version first"
#endif

/* A page has at most 2^16 blocks (its counts are 16-bit): 8 KiB of marks,
 * on the caller's stack. */
#define TRIM_MAX_BLOCKS 65536

static size_t trim_page(mi_page_t* page, uintptr_t os_page, uint64_t* marks) {
  const size_t bsize = mi_page_block_size(page);
  const size_t cap = page->capacity;
  if (page->reserved <= 1 || cap <= 1 || bsize == 0) return 0;
  /* Large OS pages cannot be given back in part (mimalloc never resets
   * them either). */
  if (page->memid.is_pinned) return 0;
  uint8_t* const start = mi_page_start(page);
  /* Nothing to give back unless a whole OS page lies past the start's one. */
  if (_mi_align_up((uintptr_t)start + cap * bsize, os_page) - _mi_align_up((uintptr_t)start + bsize, os_page) < os_page) return 0;
  /* A page at least half in use rarely has a free tail worth a walk of
   * its list (mi_collect, just before, made `used` exact). */
  if ((size_t)page->used * 2 > cap) return 0;
  _mi_page_free_collect(page, true);
  if (page->used == 0 || page->free == NULL) return 0; /* all free: mimalloc frees it */
  const size_t words = (cap + 63) / 64;
  memset(marks, 0, words * sizeof(uint64_t));
  size_t seen = 0;
  for (mi_block_t* b = page->free; b != NULL; b = mi_block_next(page, b)) {
    const uintptr_t off = (uintptr_t)b - (uintptr_t)start;
    const size_t idx = off / bsize;
    /* Not a list we understand (outside the page, misaligned, or longer
     * than the page's capacity: a cycle): leave the page as it is. */
    if ((uintptr_t)b < (uintptr_t)start || idx >= cap || off % bsize != 0 || ++seen > cap) return 0;
    marks[idx / 64] |= (uint64_t)1 << (idx % 64);
  }
  size_t hi = cap; /* blocks up to and including the last one in use */
  while (hi > 0 && (marks[(hi - 1) / 64] >> ((hi - 1) % 64) & 1)) hi--;
  if (hi == 0) return 0;
  const uintptr_t from = _mi_align_up((uintptr_t)start + hi * bsize, os_page);
  uintptr_t to = _mi_align_up((uintptr_t)start + cap * bsize, os_page);
  const uintptr_t area_end = _mi_align_down((uintptr_t)start + (size_t)page->reserved * bsize, os_page);
  if (to > area_end) to = area_end;
  if (to <= from) return 0;
  const size_t new_cap = (from - (uintptr_t)start) / bsize; /* blocks wholly before `from` */
  if (new_cap < hi || new_cap >= cap) return 0;
  /* Unlink the blocks at or past new_cap (all free, as new_cap >= hi). */
  mi_block_t* head = NULL;
  mi_block_t* tail = NULL;
  for (mi_block_t* b = page->free; b != NULL;) {
    mi_block_t* next = mi_block_next(page, b);
    if ((size_t)(((uintptr_t)b - (uintptr_t)start) / bsize) < new_cap) {
      if (tail == NULL) head = b; else mi_block_set_next(page, tail, b);
      tail = b;
    }
    b = next;
  }
  if (tail != NULL) mi_block_set_next(page, tail, NULL);
  page->free = head;
  page->capacity = (uint16_t)new_cap;
  page->free_is_zero = false;
  if (madvise((void*)from, to - from, MADV_DONTNEED) != 0) return 0;
  return to - from;
}

/* Trims the pages of the calling thread's default heap; returns the bytes
 * given back. Call it only on a thread that is not allocating meanwhile
 * (it is that thread: call it between tasks). */
size_t wharf_mi_trim_pages(void) {
  mi_theap_t* theap = _mi_theap_default();
  if (theap == NULL || !mi_theap_is_initialized(theap)) return 0;
  const uintptr_t os_page = _mi_os_page_size();
  if (os_page == 0 || (os_page & (os_page - 1)) != 0) return 0;
  uint64_t marks[TRIM_MAX_BLOCKS / 64];
  size_t given = 0;
  for (size_t bin = 0; bin < MI_BIN_FULL; bin++) {
    for (mi_page_t* page = theap->pages[bin].first; page != NULL; page = page->next) {
      given += trim_page(page, os_page, marks);
    }
  }
  return given;
}

/* Whether the library the binary links lays its pages and heaps out as
 * this file reads them: a block just allocated must lie in a page that
 * names this thread's heap, whose block size is the block's usable size
 * (no padding, no encoded keys shifting the fields), and which sits in
 * the heap's queue for that size (no guarded-page fields moving the
 * queues). Run once at start; the trim stays off if it fails. */
bool wharf_mi_trim_check(void) {
  void* p = mi_malloc(8);
  if (p == NULL) return false;
  mi_theap_t* theap = _mi_theap_default();
  mi_page_t* page = _mi_ptr_page(p);
  bool ok = theap != NULL && mi_theap_is_initialized(theap) && page != NULL && page->theap == theap &&
            mi_usable_size(p) == mi_page_block_size(page) && page->capacity <= page->reserved &&
            page->used >= 1 && page->used <= page->capacity;
  if (ok) {
    ok = false;
    const size_t bin = _mi_bin(mi_page_block_size(page));
    for (size_t b = 0; b <= MI_BIN_FULL && !ok; b++) {
      for (mi_page_t* q = theap->pages[b].first; q != NULL; q = q->next) {
        /* (a page just filled may already sit in the full queue) */
        if (q == page) { ok = (b == bin || b == MI_BIN_FULL); break; }
      }
    }
  }
  mi_free(p);
  return ok;
}
