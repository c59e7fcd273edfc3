//! [`HeapBytes`]: what a key owns on the heap, which a [`Summary`](super::Summary) adds up over
//! the keys it tracks ([`Summary::key_bytes`](super::Summary::key_bytes)).
//!
//! The table's own allocation counts a key's inline part (a `u64`, or a `Vec`'s pointer, length
//! and capacity); a `Vec<u8>` or `String` key also owns its bytes elsewhere. A caller that
//! reports native memory (the Node binding tells V8, `src/memory.rs`) needs those too: 1,000
//! tracked keys of 20 KB are 20 MB that the table's allocation does not show.

/// Bytes a key owns on the heap, beyond its inline size.
///
/// Implemented for the integer types, `bool` and `char` (none), `String`, `Box<str>`, and
/// `Vec<T>` and `Box<[T]>` of `Copy` elements (their allocation: a `Copy` type owns no heap
/// memory of its own), and for references (they own nothing). For another key type, return
/// what its allocations asked for; `0` is always safe, it only leaves the key bytes out of
/// [`Summary::key_bytes`](super::Summary::key_bytes).
///
/// ```
/// use keepcount_limits::heavy::HeapBytes;
///
/// assert_eq!(7u64.heap_bytes(), 0);
/// assert_eq!(b"abc".to_vec().heap_bytes(), 3);
/// ```
pub trait HeapBytes {
    /// Bytes the value owns on the heap: what its allocations asked for (the allocator may
    /// round them up).
    fn heap_bytes(&self) -> usize;
}

macro_rules! owns_nothing {
    ($($t:ty),*) => {
        $(impl HeapBytes for $t {
            #[inline]
            fn heap_bytes(&self) -> usize {
                0
            }
        })*
    };
}

owns_nothing!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, bool, char
);

impl<T: ?Sized> HeapBytes for &T {
    #[inline]
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl HeapBytes for String {
    #[inline]
    fn heap_bytes(&self) -> usize {
        self.capacity()
    }
}

impl HeapBytes for Box<str> {
    #[inline]
    fn heap_bytes(&self) -> usize {
        self.len()
    }
}

impl<T: Copy> HeapBytes for Vec<T> {
    #[inline]
    fn heap_bytes(&self) -> usize {
        self.capacity() * size_of::<T>()
    }
}

impl<T: Copy> HeapBytes for Box<[T]> {
    #[inline]
    fn heap_bytes(&self) -> usize {
        size_of_val::<[T]>(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_buffers_count_their_allocation_and_the_rest_nothing() {
        let mut grown = Vec::<u32>::with_capacity(10);
        grown.push(1);
        assert_eq!(grown.heap_bytes(), 40);
        assert_eq!(String::from("hello").heap_bytes(), 5);
        assert_eq!(Box::<str>::from("hey").heap_bytes(), 3);
        assert_eq!(Box::<[u16]>::from([1, 2]).heap_bytes(), 4);
        assert_eq!((-3i64).heap_bytes(), 0);
        assert_eq!("borrowed".heap_bytes(), 0);
    }
}
