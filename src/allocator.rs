//! The addon's allocator: large blocks (a sketch's counters, a limiter's key table) are mapped
//! from the system on their own and unmapped when freed; everything else goes to the system
//! allocator as before.
//!
//! Through glibc's `malloc`, a freed 256 KiB counter array stayed in the process: after the first
//! such block is freed glibc raises its mmap threshold, so later ones come from its heap, which it
//! does not shrink by itself. Making and dropping 100,000 default `Estimator`s left 346 MB of RSS
//! after collection where the fallback's `Float64Array`s left 105 MB; asking glibc to trim every
//! 128 MiB freed brought it down but cost each sketch made ~70 µs (the walk of its arenas). A
//! mapping is returned to the system the moment it is freed, and its pages are zero without a
//! `memset`. Only this addon's Rust allocations come here: Node's own are untouched.
//!
//! Linux caps a process's mappings (`vm.max_map_count`, 65,530 by default), and V8 maps its own
//! heap pages, so at most [`MAX_MAPPINGS`] blocks are mapped at once; past that they come from the
//! system allocator. Each large block starts one page early with a tag saying which, so freeing
//! it needs nothing but its address: that page (4 KiB on 128 KiB or more) is the cost.
//!
//! A `Rate`'s two 32 KiB sketches stay below the threshold, so glibc keeps them once freed:
//! making and dropping 100,000 default `Rate`s keeps 274–279 MB of RSS once they are collected
//! (fallback 123). Two ways of giving it back were measured and not kept (2026-11-28): mapping
//! blocks from 32 KiB up kept 93 MB, and giving a freed block's whole pages to the system with
//! `MADV_DONTNEED` before glibc takes it kept 121 MB; but making and closing a `Rate`, 100,000 in a
//! loop, went from 10 µs to 37 and 46 µs: memory given back faults in again when it is next used.
//! A program makes its rates once and keeps them, so that cost would buy it nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Blocks of at least this many bytes are large: glibc's own default mmap threshold, which it
/// only ever raises.
const LARGE: usize = 128 * 1024;

/// The page in front of a large block that holds its tag, and the largest alignment a large block
/// may ask for.
const PAGE: usize = 4096;

/// The most large blocks mapped at once: a quarter of Linux's default cap on mappings, the rest
/// left to V8 and everything else in the process (16,384 default sketches: 4 GiB of counters).
const MAX_MAPPINGS: usize = 16_384;

/// Large blocks mapped now.
static MAPPINGS: AtomicUsize = AtomicUsize::new(0);

/// The tag of a mapped large block.
const MAPPED: usize = 0x6b63_6d61_7070_6564;
/// The tag of a large block from the system allocator.
const SYSTEM: usize = 0x6b63_7379_7374_656d;

/// See the module documentation.
pub struct Allocator;

/// Whether `layout` is a large block (with its tag page in front).
fn large(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= PAGE
}

/// Alignment `malloc` gives every block on the platforms this builds for.
const MALLOC_ALIGN: usize = 16;

/// The system allocator's layout for a large block of `size` bytes aligned to `align`, and its
/// tag page. The usual alignment (counters need 8) keeps `calloc`, which leaves fresh memory
/// untouched where an aligned allocation would zero every page of it (a sketch's whole RSS).
fn system_layout(size: usize, align: usize) -> Option<Layout> {
    Layout::from_size_align(size.checked_add(PAGE)?, align.max(MALLOC_ALIGN)).ok()
}

/// A large block of `size` bytes aligned to `align` (at most a page), zeroed if `zeroed`, or null.
fn allocate(size: usize, align: usize, zeroed: bool) -> *mut u8 {
    let Some(total) = size.checked_add(PAGE) else {
        return std::ptr::null_mut();
    };
    // Relaxed: a budget, not a synchronisation; going a few over it under a race is harmless.
    if MAPPINGS.fetch_add(1, Ordering::Relaxed) < MAX_MAPPINGS {
        let base = map(total);
        if !base.is_null() {
            // SAFETY: `base` is a fresh, writable, page-aligned mapping of at least a page.
            return unsafe { tagged(base, MAPPED) };
        }
    }
    MAPPINGS.fetch_sub(1, Ordering::Relaxed);
    let Some(layout) = system_layout(size, align) else {
        return std::ptr::null_mut();
    };
    // SAFETY: `layout` has a non-zero size.
    let base = unsafe {
        if zeroed {
            System.alloc_zeroed(layout)
        } else {
            System.alloc(layout)
        }
    };
    if base.is_null() {
        return base;
    }
    // SAFETY: `base` is a fresh, writable block of at least a page, aligned to `align` and to a
    // usize, so the block a page further is too.
    unsafe { tagged(base, SYSTEM) }
}

/// Writes `tag` at `base` and returns the block after its tag page.
///
/// # Safety
/// `base` is writable, aligned to a usize and at least a page followed by the block.
unsafe fn tagged(base: *mut u8, tag: usize) -> *mut u8 {
    // SAFETY: the caller's guarantees.
    unsafe {
        base.cast::<usize>().write(tag);
        base.add(PAGE)
    }
}

/// Frees a large block of `size` bytes aligned to `align` that [`allocate`] returned as `ptr`.
///
/// # Safety
/// As `GlobalAlloc::dealloc` for a large layout.
unsafe fn free(ptr: *mut u8, size: usize, align: usize) {
    // SAFETY: `allocate` put the tag page right before the block.
    let base = unsafe { ptr.sub(PAGE) };
    // SAFETY: the tag was written there and the page is still ours.
    if unsafe { base.cast::<usize>().read() } == MAPPED {
        // SAFETY: `base` is a mapping of `size + PAGE` bytes made by `map`. A failure (which
        // would need the kernel out of memory to split nothing) leaves the mapping counted.
        if unsafe { libc::munmap(base.cast(), size + PAGE) } == 0 {
            MAPPINGS.fetch_sub(1, Ordering::Relaxed);
        }
    } else if let Some(layout) = system_layout(size, align) {
        // SAFETY: `base` came from the system allocator with this layout.
        unsafe { System.dealloc(base, layout) }
    }
}

// SAFETY: a large layout (decided from the layout alone, the same at allocation and at
// deallocation) always gets a tagged block from `allocate`, freed by `free`; any other goes to the
// system allocator unchanged. A large block is its layout's alignment (at most a page) a page
// after a base that has it: a mapping's page, or the system allocator's block of that alignment.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if large(layout) {
            allocate(layout.size(), layout.align(), false)
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if large(layout) {
            allocate(layout.size(), layout.align(), true)
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if large(layout) {
            // SAFETY: a large layout's block came from `allocate`.
            unsafe { free(ptr, layout.size(), layout.align()) }
        } else {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !large(layout) && !large(new) {
            // SAFETY: forwarded with the caller's guarantees.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // A large block on either side: a new block, the contents copied over.
        // SAFETY: `new` is a valid layout of non-zero size (the caller's guarantees).
        let moved = unsafe { self.alloc(new) };
        if !moved.is_null() {
            // SAFETY: both blocks are live, hold at least the smaller size and do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        moved
    }
}

/// A private anonymous mapping of `size` bytes, or null.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_mapping_budget_large_blocks_come_from_the_system_and_free_alike() {
        // More large blocks alive at once than may be mapped: every one is usable and zeroed,
        // and all free (mapped ones give their mapping back).
        let layout = Layout::from_size_align(LARGE, 8).unwrap();
        let blocks: Vec<*mut u8> = (0..MAX_MAPPINGS + 64)
            .map(|_| {
                // SAFETY: a valid layout of non-zero size.
                let block = unsafe { Allocator.alloc_zeroed(layout) };
                assert!(!block.is_null());
                // SAFETY: the block holds LARGE bytes.
                unsafe {
                    assert_eq!(*block.add(LARGE - 1), 0);
                    block.write(7);
                }
                block
            })
            .collect();
        for block in blocks {
            // SAFETY: allocated above with this layout.
            unsafe { Allocator.dealloc(block, layout) };
        }
    }

    #[test]
    fn realloc_keeps_the_contents_across_the_threshold() {
        let small = Layout::from_size_align(1024, 8).unwrap();
        // SAFETY: valid layouts; each block is written within its size and freed with its layout.
        unsafe {
            let block = Allocator.alloc(small);
            block.write_bytes(9, 1024);
            let grown = Allocator.realloc(block, small, 2 * LARGE);
            assert_eq!(*grown.add(1023), 9);
            grown.add(2 * LARGE - 1).write(5);
            let large_layout = Layout::from_size_align(2 * LARGE, 8).unwrap();
            let shrunk = Allocator.realloc(grown, large_layout, 512);
            assert_eq!(*shrunk.add(511), 9);
            Allocator.dealloc(shrunk, Layout::from_size_align(512, 8).unwrap());
        }
    }
}
