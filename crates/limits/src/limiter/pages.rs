//! Memory on transparent huge pages: the key table of a large limiter ([`HugePages`], its
//! allocator) and the chunks of its quota arena ([`Pages`]).
//!
//! Over a million keys a check reads one entry at random in some 80 MB of table, far beyond the
//! reach of the TLB with 4 KB pages, so its cache miss would also walk the page tables. Linux
//! backs anonymous memory with 2 MB pages only where asked
//! (`/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` by default on many
//! distributions), so blocks of 2 MB or more are allocated 2 MB-aligned and advised with
//! `MADV_HUGEPAGE` before their first write: the TLB then covers them, and only the cache misses
//! remain. Elsewhere, and for smaller arrays, they are plain heap arrays.

use std::alloc::{self, Layout};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};

use allocator_api2::alloc::{AllocError, Allocator, Global};

/// Size (and alignment) of a huge page on x86-64 and of the smallest one on aarch64 with 4 KB
/// base pages; arrays this large are worth advising.
const HUGE_PAGE: usize = 2 << 20;

/// The layout of `len` `T`s: huge-page aligned from [`HUGE_PAGE`] bytes on. Both allocation and
/// release derive it from `len` alone, so they always agree.
fn layout<T>(len: usize) -> Layout {
    let array =
        Layout::array::<T>(len).unwrap_or_else(|_| alloc::handle_alloc_error(Layout::new::<T>()));
    if array.size() >= HUGE_PAGE {
        array
            .align_to(HUGE_PAGE)
            .unwrap_or_else(|_| alloc::handle_alloc_error(array))
    } else {
        array
    }
}

/// Asks the kernel to back `bytes` at `start` with huge pages.
#[cfg(target_os = "linux")]
fn advise(start: *mut u8, bytes: usize) {
    // SAFETY: `madvise` only reads the range's address; the range is an allocation of ours that
    // nothing has touched yet, and `MADV_HUGEPAGE` changes how it is backed, not what it holds.
    // Failure (no transparent huge pages in this kernel) leaves it on base pages: not an error.
    unsafe { libc::madvise(start.cast(), bytes, libc::MADV_HUGEPAGE) };
}

#[cfg(not(target_os = "linux"))]
fn advise(_start: *mut u8, _bytes: usize) {}

/// The layout `HugePages` allocates for `layout`: huge-page aligned from [`HUGE_PAGE`] bytes on.
fn huge(layout: Layout) -> Result<Layout, AllocError> {
    if layout.size() >= HUGE_PAGE {
        layout.align_to(HUGE_PAGE).map_err(|_| AllocError)
    } else {
        Ok(layout)
    }
}

/// The global allocator, except that allocations of 2 MB or more are 2 MB-aligned and advised
/// onto huge pages before their first write: the allocator of the key table's `hashbrown` table,
/// whose one allocation holds the control bytes and the entries.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HugePages;

// SAFETY: every block comes from `Global` with the layout `huge` derives from the caller's, and
// goes back to it with the layout derived the same way from the same caller's layout, as the
// `Allocator` contract requires (the caller deallocates with the layout it allocated with).
unsafe impl Allocator for HugePages {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        let layout = huge(layout)?;
        let block = Global.allocate(layout)?;
        if layout.size() >= HUGE_PAGE {
            advise(block.as_ptr().cast(), layout.size());
        }
        Ok(block)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if let Ok(layout) = huge(layout) {
            // SAFETY: allocated by `allocate` above with this same derived layout.
            unsafe { Global.deallocate(ptr, layout) };
        }
    }
}

/// An owned array of `T`s, huge-page backed from 2 MB on: a `Box<[T]>` with another layout.
pub(crate) struct Pages<T> {
    start: NonNull<T>,
    len: usize,
    /// Owns `T`s (for `Send`, `Sync` and drop checking) as a `Box<[T]>` would.
    _owns: PhantomData<Box<[T]>>,
}

// SAFETY: owns its `T`s exclusively, like `Box<[T]>`, whose bounds these are.
unsafe impl<T: Send> Send for Pages<T> {}
// SAFETY: as above; shared access hands out only `&T`.
unsafe impl<T: Sync> Sync for Pages<T> {}

impl<T> Pages<T> {
    /// `len` entries, entry `i` being `entry(i)`.
    pub(crate) fn from_fn(len: usize, mut entry: impl FnMut(usize) -> T) -> Self {
        let layout = layout::<T>(len);
        let start = if layout.size() == 0 {
            NonNull::dangling()
        } else {
            // SAFETY: the layout's size is not zero.
            let raw = unsafe { alloc::alloc(layout) };
            let Some(start) = NonNull::new(raw) else {
                alloc::handle_alloc_error(layout)
            };
            if layout.size() >= HUGE_PAGE {
                advise(raw, layout.size());
            }
            start.cast::<T>()
        };
        for i in 0..len {
            // SAFETY: `i < len`, inside the allocation; each entry is written once, before any
            // read. A panicking `entry` leaks the allocation and the entries written: no UB.
            unsafe { start.as_ptr().add(i).write(entry(i)) };
        }
        Self {
            start,
            len,
            _owns: PhantomData,
        }
    }

    /// Gives up ownership: the entries stay allocated until [`from_raw`](Self::from_raw).
    pub(crate) fn into_raw(self) -> *mut T {
        let start = self.start.as_ptr();
        std::mem::forget(self);
        start
    }

    /// Takes back ownership of what [`into_raw`](Self::into_raw) gave up.
    ///
    /// # Safety
    /// `start` came from `into_raw` of a `Pages` of `len` entries, and is taken back once.
    pub(crate) unsafe fn from_raw(start: *mut T, len: usize) -> Self {
        Self {
            // SAFETY: `into_raw` returned a non-null pointer (per the contract).
            start: unsafe { NonNull::new_unchecked(start) },
            len,
            _owns: PhantomData,
        }
    }
}

impl<T> Deref for Pages<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialized entries from `start`, owned by `self`.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for Pages<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.len) }
    }
}

impl<T: Clone> Clone for Pages<T> {
    fn clone(&self) -> Self {
        Self::from_fn(self.len, |i| self[i].clone())
    }
}

impl<T> Drop for Pages<T> {
    fn drop(&mut self) {
        let layout = layout::<T>(self.len);
        // SAFETY: the entries are initialized and ours; nothing reads them after this.
        unsafe { ptr::drop_in_place(ptr::slice_from_raw_parts_mut(self.start.as_ptr(), self.len)) };
        if layout.size() != 0 {
            // SAFETY: allocated by `from_fn` with this layout, which depends on `len` alone.
            unsafe { alloc::dealloc(self.start.as_ptr().cast(), layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_arrays_are_huge_page_aligned_and_small_ones_are_not_padded() {
        let large = Pages::from_fn(HUGE_PAGE / 8, |i| i as u64);
        assert_eq!(large.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(large[12345], 12345);
        assert_eq!(layout::<u64>(8).align(), 8);
        assert_eq!(layout::<u64>(8).size(), 64);
    }

    #[test]
    fn the_allocator_aligns_large_blocks_to_huge_pages() {
        let large = Layout::from_size_align(HUGE_PAGE + 8, 8).unwrap();
        let block = HugePages.allocate(large).unwrap();
        assert_eq!(block.as_ptr().cast::<u8>() as usize % HUGE_PAGE, 0);
        // SAFETY: allocated just above with this layout.
        unsafe { HugePages.deallocate(block.cast(), large) };
        let small = Layout::from_size_align(64, 8).unwrap();
        let block = HugePages.allocate(small).unwrap();
        // SAFETY: as above.
        unsafe { HugePages.deallocate(block.cast(), small) };
    }

    #[test]
    fn clones_and_drops_every_entry_once() {
        use std::rc::Rc;
        let shared = Rc::new(());
        let pages = Pages::from_fn(100, |_| shared.clone());
        let copy = pages.clone();
        assert_eq!(Rc::strong_count(&shared), 201);
        drop(pages);
        let raw = copy.into_raw();
        // SAFETY: from `into_raw` of 100 entries, once.
        drop(unsafe { Pages::from_raw(raw, 100) });
        assert_eq!(Rc::strong_count(&shared), 1);
        assert!(Pages::<u8>::from_fn(0, |_| 0).is_empty());
    }
}
