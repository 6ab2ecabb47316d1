//! The gateway's allocator: mimalloc, asked the way the gateway needs it, and
//! told to hand freed memory back to the operating system.
//!
//! The binary allocates with [`Allocator`] (`main.rs`). Rebuilding a large catalog
//! parses every upstream's body into `Value` trees and drops them; mimalloc
//! keeps freed pages for a while before it purges them, so a 10,000-tool
//! gateway stayed resident at several times its live data
//! (benches/HISTORY.md, "Figures behind the code").

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every mimalloc block of 16 bytes or more has
/// (`MI_MAX_ALIGN_SIZE`; smaller blocks are aligned to their size class).
const MIN_ALIGN: usize = 16;

/// mimalloc as the global allocator. The `mimalloc` crate asks for every
/// block through `mi_malloc_aligned`, whose fast path only covers blocks up to
/// 1 KB: each larger one (a request's future, which pingora boxes; read
/// buffers) took the slower, over-allocating aligned path and marked its
/// page for slower frees (benches/HISTORY.md, "Figures behind the code"). Like std's system allocator, this
/// one asks plainly when the alignment is one mimalloc gives anyway.
pub struct Allocator;

/// Whether a plain `mi_malloc` of this layout is aligned enough.
fn plain_is_aligned(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

// SAFETY: every block comes from mimalloc and goes back to it; the plain
// calls are only used where mimalloc's own alignment meets the layout's.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if plain_is_aligned(layout.align(), layout.size()) {
            unsafe { mi::mi_malloc(layout.size()) as *mut u8 }
        } else {
            unsafe { mi::mi_malloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if plain_is_aligned(layout.align(), layout.size()) {
            unsafe { mi::mi_zalloc(layout.size()) as *mut u8 }
        } else {
            unsafe { mi::mi_zalloc_aligned(layout.size(), layout.align()) as *mut u8 }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        unsafe { mi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if plain_is_aligned(layout.align(), new_size) {
            unsafe { mi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8 }
        } else {
            unsafe { mi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8 }
        }
    }
}

/// mimalloc's `mi_option_purge_delay` (v3's `mi_option_t`). By hand because
/// libmimalloc-sys names the options on either side (14, 16) but not this
/// one; a test checks the index against the option's default.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps the gateway's memory in 4 KiB pages. A transparent huge page is
/// resident whole once any byte of it is touched, and is purged only whole,
/// so live data scattered over a catalog rebuild's pages held much more
/// than it used (the scale benchmark's memory, benches/README.md). Redis
/// advises turning THP off for the same reason.
pub fn use_small_pages() {
    // mimalloc is built without its `MADV_HUGEPAGE` advice (libmimalloc-sys's
    // `no_thp` feature); the prctl also covers hosts whose THP mode is
    // `always`. A kernel without it (before 3.15) leaves THP as it was.
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Makes mimalloc purge freed pages at once rather than after its default
/// delay. Under call load this costs about one `madvise` per 30 calls
/// (measured with strace), nothing the throughput benchmark can see.
pub fn purge_freed_memory_at_once() {
    // SAFETY: sets an integer option; no pointers are involved.
    unsafe { mi::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}

/// Returns the calling thread's freed, unused memory to the OS now: called
/// on the control thread after it publishes a catalog.
pub fn release_freed_memory() {
    // SAFETY: mi_collect takes no pointers; it only walks mimalloc's own
    // heap of the calling thread.
    unsafe { mi::mi_collect(true) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_meets_its_layout() {
        // Sizes across mimalloc's small, medium and large classes, each at
        // the alignments a plain allocation covers and beyond them.
        for size in [1, 7, 8, 12, 16, 24, 40, 100, 1000, 1025, 5440, 70_000, 3 << 20] {
            for align in [1, 2, 8, 16, 32, 64, 4096] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; each block is written within its
                // size, reallocated, and freed once with its layout.
                unsafe {
                    for zeroed in [false, true] {
                        let p = if zeroed { Allocator.alloc_zeroed(layout) } else { Allocator.alloc(layout) };
                        assert!(!p.is_null());
                        assert_eq!(p as usize % align, 0, "size {size}, align {align}");
                        if zeroed {
                            assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
                        }
                        p.write_bytes(0xAB, size);
                        let grown = Allocator.realloc(p, layout, size * 2 + 1);
                        assert_eq!(grown as usize % align, 0, "realloc: size {size}, align {align}");
                        assert_eq!(*grown.add(size - 1), 0xAB, "realloc keeps the contents");
                        Allocator.dealloc(grown, Layout::from_size_align(size * 2 + 1, align).unwrap());
                    }
                }
            }
        }
    }

    #[test]
    fn the_option_set_is_the_purge_delay() {
        // The index is written by hand: if mimalloc's enum moved, this would
        // read another option, whose default is not the purge delay's 1,000 ms
        // (v3; its header comment still says 10).
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // SAFETY: reads an integer option.
            assert_eq!(unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }, 1000);
        }
    }

    #[test]
    fn small_pages_turn_off_transparent_huge_pages() {
        use_small_pages();
        #[cfg(target_os = "linux")]
        {
            // SAFETY: PR_GET_THP_DISABLE takes integer arguments only.
            assert_eq!(unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) }, 1);
        }
    }
}
