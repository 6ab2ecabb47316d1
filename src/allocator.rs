//! Handing memory the gateway freed back to the operating system.
//!
//! The binary allocates with mimalloc (`main.rs`). Rebuilding a large catalog
//! parses every upstream's body into `Value` trees and drops them; mimalloc
//! keeps freed pages for a while before it purges them, so a 10,000-tool
//! gateway sat at about 100 MB resident when its live data was well under
//! that (benches/README.md).

/// mimalloc's `mi_option_purge_delay` (its `mi_option_t` enum, v3 header;
/// the Rust bindings name the options on either side, 14 and 16, not this one).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc's `mi_option_allow_thp`, in the same enum.
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Keeps the gateway's memory in 4 KiB pages. mimalloc asks the kernel for
/// transparent huge pages on its arenas (`MADV_HUGEPAGE`); a 2 MiB page is
/// resident whole once any byte of it is touched, and is purged only whole,
/// so live data scattered over a catalog rebuild's pages held about 16 MB
/// more than it used (scale benchmark, 10,000 tools: 62.7 MB -> 46.5 MB).
/// Redis advises turning THP off for the same reason.
pub fn use_small_pages() {
    // SAFETY: sets an integer option; no pointers are involved.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) }
    // The option stops new `MADV_HUGEPAGE` advice; the prctl also covers the
    // arena mimalloc mapped before main ran and hosts whose THP mode is
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
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}

/// Returns the calling thread's freed, unused memory to the OS now: called
/// on the control thread after it publishes a catalog.
pub fn release_freed_memory() {
    // SAFETY: mi_collect takes no pointers; it only walks mimalloc's own
    // heap of the calling thread.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // The allow-THP option defaults to 1, its neighbours to 16 and 0: a
        // moved enum would fail the first assertion. No other test sets it.
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
            // SAFETY: reads an integer option.
            assert_eq!(unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) }, 1);
        }
        use_small_pages();
        // SAFETY: reads an integer option.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP) }, 0);
        #[cfg(target_os = "linux")]
        {
            // SAFETY: PR_GET_THP_DISABLE takes integer arguments only.
            assert_eq!(unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) }, 1);
        }
    }
}
