//! The addon's allocator: large blocks (a sketch's counters, a limiter's key table) are mapped
//! from the system on their own and unmapped when freed; everything else goes to the system
//! allocator as before.
//!
//! Through glibc's `malloc`, a freed 256 KiB counter array stayed in the process: after the first
//! such block is freed glibc raises its mmap threshold, so later ones come from its heap, which it
//! does not shrink by itself. Making and dropping 20,000 default `Estimator`s left 469 MB of RSS
//! after collection where the fallback's `Float64Array`s left 83 MB; asking glibc to trim every
//! 128 MiB freed brought it to 70 MB but cost each sketch made ~70 µs (the walk of its arenas).
//! A mapping is returned to the system the moment it is freed, and its pages are zero without a
//! `memset`. Only this addon's Rust allocations come here: Node's own are untouched.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks of at least this many bytes are mapped: glibc's own default threshold, which it only
/// ever raises.
const MAP_AT: usize = 128 * 1024;

/// The alignment a fresh mapping is guaranteed (a page).
const PAGE: usize = 4096;

/// See the module documentation.
pub struct Allocator;

/// Whether `layout` gets a mapping of its own.
fn mapped(layout: Layout) -> bool {
    layout.size() >= MAP_AT && layout.align() <= PAGE
}

// SAFETY: every block is either the system allocator's (allocated, resized and freed there) or a
// private anonymous mapping of exactly `layout.size()` bytes (page-aligned, so any alignment up to
// a page holds), unmapped with that size; `mapped` decides which from the layout alone, and a
// block's layout is the same at allocation and at deallocation.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(layout) {
            map(layout.size())
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(layout) {
            // Fresh anonymous pages are zero.
            map(layout.size())
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(layout) {
            // SAFETY: `ptr` is a mapping of `layout.size()` bytes made by `map`.
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !mapped(layout) && !mapped(new) {
            // SAFETY: forwarded with the caller's guarantees.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // Across the threshold, or between mappings: a new block, the contents copied over.
        let moved = if mapped(new) {
            map(new_size)
        } else {
            // SAFETY: `new` is a valid, non-zero-size layout (the caller's guarantees).
            unsafe { System.alloc(new) }
        };
        if !moved.is_null() {
            // SAFETY: both blocks are live and hold at least the smaller size; they do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        moved
    }
}

/// A private anonymous mapping of `size` bytes, or null (what an allocator returns on failure).
fn map(size: usize) -> *mut u8 {
    // SAFETY: a new anonymous mapping touches no existing memory.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        ptr.cast()
    }
}
