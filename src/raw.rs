//! Fast paths: the hot methods (`Estimator.incr`/`get`, `Rate.observe`) as raw N-API functions
//! that take their object as a numeric handle, exported by [`crate::fast_paths`].
//!
//! # Why not `#[napi]` methods
//! A napi-rs 3 class method pays, per call, for the receiver: `napi_unwrap` (a V8 private-symbol
//! lookup, ~570 instructions), a class-identity check, and the `&self` borrow tracking
//! (`register_native_borrow`, a borrow scope with a `Vec` and a `HashMap` entry, malloc/free):
//! ~2,600 of the ~4,300 instructions (callgrind) an `Estimator.incr` with a 12-byte string key
//! cost, more than the hashing, the string copy and the counters together.
//!
//! # Why a handle
//! The object is named by a number: its slot in a per-thread [`Slab`] and the slot's generation.
//! Reading it is one `napi_get_value_double` and an indexed load (~100 instructions), and any
//! number JavaScript passes is either a live object of the right type or a `TypeError`: a handle
//! cannot be forged into a pointer, unlike an `External`. Functions bound to each object through
//! `napi_create_function`'s data pointer read the object for free, but creating six of them cost
//! ~15 µs per sketch (V8 builds a function template for each), where a handle costs nothing.
//!
//! # Lifetime and threads
//! The napi-rs object owns its slot ([`Slot`]) and empties it when it is collected; the adapter
//! (`lib/native.cts`) keeps the object alongside its handle. A handle used after that is a
//! `TypeError` (the generation changed), never a dangling pointer. Slabs are thread-local and
//! each environment (a worker thread's included) lives on its own thread, loads the addon
//! separately and gets its own functions, so nothing is shared across environments.
//!
//! # Errors and panics
//! [`call`] wraps every body in `catch_unwind`: a failure is thrown as the JavaScript error
//! `error.rs` maps it to, a panic as a plain `Error`; nothing unwinds into Node.
//!
//! # Measured
//! Through the public API (`lib/`), 1,000,000 distinct ~12-byte IPv4 string keys (integers for
//! `incr(int)`), `Estimator` 4 × 8192, `Rate` 1 s, release build, Node 20.20.2, AMD EPYC (2 vCPU,
//! load 2-3), 2026-11-21. ns/call: median of 3 interleaved processes (each the median of 5 passes).
//! Ir/call: `valgrind --tool=callgrind node script.js`, (6 passes − 2 passes over 200,000 keys) /
//! 800,000 calls; ±~100 from GC between runs.
//!
//! | call          | napi-rs methods | fast paths (this) | fallback (TS) |
//! |---------------|-----------------|-------------------|---------------|
//! | `incr(str)`   | 331 ns, 4,350 Ir | 95 ns, 1,200 Ir  | 131 ns, 1,700 Ir |
//! | `get(str)`    | 337 ns, 3,900 Ir | 88 ns, 1,100 Ir  | 111 ns, 1,600 Ir |
//! | `observe(str)`| 451 ns, 5,170 Ir | 155 ns, 1,770 Ir | 187 ns, 2,200 Ir |
//! | `incr(int)`   | 290 ns, 3,970 Ir | 77 ns, 750 Ir    | 102 ns, 1,150 Ir |
//!
//! Of a string `incr`'s ~1,000 native instructions: V8's `String::Write` ~210 ([`crate::keys`]),
//! HalfSipHash ~210 (format version 1; SipHash-1-3 since), the four counters ~200, the handle ~130, the other N-API calls ~230.
//! `new Estimator` costs ~3.0 µs (~2.4 µs with the napi-rs methods alone, fallback ~2.0 µs);
//! functions bound per object instead of the handle were ~10 ns faster per call and ~22 µs per
//! `new Estimator`.

use crate::error::{Failure, Result, throw};
use napi::sys;
use std::cell::RefCell;
use std::ffi::CStr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::rc::Rc;
use std::thread::LocalKey;

/// A raw N-API callback.
pub(crate) type Callback =
    unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// `NAPI_AUTO_LENGTH`: the name is NUL-terminated.
const AUTO_LENGTH: isize = -1;

/// Generations wrap below 2^17, so a handle (`(generation × 16 + tag) × 2^32 + index`) stays
/// below 2^53.
const GENERATIONS: u32 = 1 << 17;
/// Distinct tags, one per type: the low four bits of a handle's high word.
const TAGS: u32 = 16;

/// The objects of one type on this thread, by handle.
pub(crate) struct Slab<T> {
    /// In [0, 16), distinct per type: a handle of one type never names an object of another.
    tag: u32,
    entries: Vec<Entry<T>>,
    /// Indices of empty entries.
    free: Vec<u32>,
}

struct Entry<T> {
    /// In [1, 2^19): part of the handle, bumped when the entry is emptied.
    generation: u32,
    value: Option<Rc<T>>,
}

impl<T> Slab<T> {
    /// An empty slab whose handles carry `tag` (in [0, 16): 0 sketches, 1 rates, 2 limiters, 3 heavy
    /// hitters, 4 shared sketches, 5 shared limiters, 6 shared rates, 7 shared in-flight counts,
    /// 8 rates over a `SharedArrayBuffer`).
    pub(crate) const fn new(tag: u32) -> Self {
        Self {
            tag: tag % TAGS,
            entries: Vec::new(),
            free: Vec::new(),
        }
    }

    fn insert(&mut self, value: Rc<T>) -> Option<f64> {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                let index = u32::try_from(self.entries.len()).ok()?;
                self.entries.push(Entry {
                    generation: 1,
                    value: None,
                });
                index
            }
        };
        let entry = &mut self.entries[index as usize];
        entry.value = Some(value);
        let high = entry.generation * TAGS + self.tag;
        Some(f64::from(high) * 4_294_967_296.0 + f64::from(index))
    }

    fn remove(&mut self, index: u32) {
        if let Some(entry) = self.entries.get_mut(index as usize)
            && entry.value.take().is_some()
        {
            entry.generation = entry.generation % (GENERATIONS - 1) + 1;
            self.free.push(index);
        }
    }

    #[inline(always)]
    fn get(&self, handle: f64) -> Option<&Rc<T>> {
        // Exact for every handle insert() makes; anything else misses (NaN and negatives become
        // 0, generation 0 never exists).
        let handle = handle as u64;
        let entry = self.entries.get((handle & 0xffff_ffff) as usize)?;
        if u64::from(entry.generation * TAGS + self.tag) != handle >> 32 {
            return None;
        }
        entry.value.as_ref()
    }
}

/// An object's place in its slab; empties it when dropped (the napi-rs object was collected).
pub(crate) struct Slot<T: 'static> {
    slab: &'static LocalKey<RefCell<Slab<T>>>,
    handle: f64,
}

impl<T: 'static> Slot<T> {
    /// Files `value` in `slab`; `None` only if 2^32 objects are alive on this thread.
    pub(crate) fn new(slab: &'static LocalKey<RefCell<Slab<T>>>, value: Rc<T>) -> Result<Self> {
        slab.with_borrow_mut(|slab| slab.insert(value))
            .map(|handle| Self { slab, handle })
            .ok_or_else(|| Failure::internal("too many objects on this thread"))
    }

    /// The number JavaScript passes to the fast paths; `NaN` (no object) once vacated.
    pub(crate) fn handle(&self) -> f64 {
        self.handle
    }

    /// Empties the slot now (`close()`): the handle names nothing from here on, and dropping the
    /// slot later does nothing, since its entry may hold another object by then.
    pub(crate) fn vacate(&mut self) {
        self.empty();
        self.handle = f64::NAN;
    }

    fn empty(&self) {
        if self.handle.is_nan() {
            return;
        }
        let index = (self.handle as u64 & 0xffff_ffff) as u32;
        // At thread exit the slab may be gone already, taking the value with it.
        let _ = self
            .slab
            .try_with(|slab| slab.try_borrow_mut().map(|mut slab| slab.remove(index)));
    }
}

impl<T: 'static> Drop for Slot<T> {
    fn drop(&mut self) {
        self.empty();
    }
}

/// The live object `handle` names in `slab`, or a `TypeError`.
///
/// # Safety
/// `env` and `handle` must be live handles of the current call.
#[inline(always)]
pub(crate) unsafe fn resolve<T: 'static>(
    env: sys::napi_env,
    handle: sys::napi_value,
    slab: &'static LocalKey<RefCell<Slab<T>>>,
) -> Result<Rc<T>> {
    // SAFETY: caller contract.
    let handle = unsafe { number(env, handle, "The \"handle\" argument") }?;
    // A clone, so no borrow of the slab is held while the body runs.
    slab.with_borrow(|slab| slab.get(handle).cloned())
        .ok_or_else(|| Failure::invalid_type("The \"handle\" argument", "a live handle"))
}

/// A plain object with one function per `(name, callback)`.
///
/// # Safety
/// `env` must be the live env of the current call.
pub(crate) unsafe fn functions(
    env: sys::napi_env,
    functions: &[(&CStr, Callback)],
) -> Result<sys::napi_value> {
    let mut object = ptr::null_mut();
    // SAFETY: live env; valid out-pointer.
    check(unsafe { sys::napi_create_object(env, &mut object) })?;
    for &(name, callback) in functions {
        let mut function = ptr::null_mut();
        // SAFETY: live env; `name` is NUL-terminated; the callbacks use no data.
        check(unsafe {
            sys::napi_create_function(
                env,
                name.as_ptr(),
                AUTO_LENGTH,
                Some(callback),
                ptr::null_mut(),
                &mut function,
            )
        })?;
        // SAFETY: live handles; `name` is NUL-terminated.
        check(unsafe { sys::napi_set_named_property(env, object, name.as_ptr(), function) })?;
    }
    Ok(object)
}

/// The body of a fast path: reads `N` arguments (missing ones are `undefined`), runs `body`, and
/// returns its number, or throws its failure (or a panic) as a JavaScript error.
///
/// # Safety
/// `env` and `info` must be the callback's own.
#[inline(always)]
pub(crate) unsafe fn call<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&[sys::napi_value; N]) -> Result<f64>,
) -> sys::napi_value {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut argc = N;
        let mut argv = [ptr::null_mut(); N];
        // SAFETY: the callback's handles; argv has room for `argc` values.
        let status = unsafe {
            sys::napi_get_cb_info(
                env,
                info,
                &mut argc,
                argv.as_mut_ptr(),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if status != sys::Status::napi_ok {
            return Err(Failure::internal("cannot read the call's arguments"));
        }
        body(&argv)
    }));
    let failure = match outcome {
        Ok(Ok(number)) => {
            let mut result = ptr::null_mut();
            // SAFETY: live env; valid out-pointer. On failure `result` stays null: undefined.
            unsafe { sys::napi_create_double(env, number, &mut result) };
            return result;
        }
        Ok(Err(failure)) => failure,
        Err(_) => Failure::internal("a native call panicked"),
    };
    // SAFETY: the callback's live env.
    unsafe { throw(env, failure) };
    ptr::null_mut()
}

/// Defines one fast path three times, once per way of reading its key: `$str` for string keys
/// (`keys::with_str_key`), `$num` for number keys (`keys::with_number_key`) and `$any` for any key
/// (`keys::with_key`), so that `lib/native.cts` can skip the binding's type dispatch when it knows
/// the key's type. Each is a raw [`Callback`] that reads the arguments `[$arg, …]` and runs
/// `$body` through [`call`], with `$env` the callback's environment and `$read` the key reader.
///
/// ```text
/// raw::per_key_type!([incr_str, incr_num, incr_key], |env, read, [handle, key]| {
///     let sketch = raw::resolve(env, handle, &SKETCHES)?;
///     let key = read(env, key, |k| sketch.hash_key(k))?;
///     Ok(sketch.incr_hash(key, 1) as f64)
/// });
/// ```
macro_rules! per_key_type {
    ([$str:ident, $num:ident, $any:ident $(,)?], |$env:ident, $read:ident, [$($arg:ident),* $(,)?]| $body:block) => {
        $crate::raw::per_key_type!(@one $str, with_str_key, |$env, $read, [$($arg),*]| $body);
        $crate::raw::per_key_type!(@one $num, with_number_key, |$env, $read, [$($arg),*]| $body);
        $crate::raw::per_key_type!(@one $any, with_key, |$env, $read, [$($arg),*]| $body);
    };
    (@one $name:ident, $reader:ident, |$env:ident, $read:ident, [$($arg:ident),*]| $body:block) => {
        unsafe extern "C" fn $name(
            $env: napi::sys::napi_env,
            info: napi::sys::napi_callback_info,
        ) -> napi::sys::napi_value {
            use $crate::keys::$reader as $read;
            // SAFETY: this callback's handles.
            unsafe { $crate::raw::call($env, info, |&[$($arg),*]| $body) }
        }
    };
}
pub(crate) use per_key_type;

/// A number argument as `f64`, or a `TypeError` naming `what`.
///
/// # Safety
/// `env` and `value` must be live handles of the current call.
#[inline(always)]
pub(crate) unsafe fn number(env: sys::napi_env, value: sys::napi_value, what: &str) -> Result<f64> {
    let mut number = 0.0;
    // SAFETY: live handles; a non-number returns `napi_number_expected`.
    match unsafe { sys::napi_get_value_double(env, value, &mut number) } {
        sys::Status::napi_ok => Ok(number),
        _ => Err(Failure::invalid_type(what, "of type number")),
    }
}

/// A count argument (`events`, `value`): a safe integer, else a `TypeError` (not a number) or a
/// `RangeError`, naming `what`.
///
/// # Safety
/// `env` and `value` must be live handles of the current call.
#[inline(always)]
pub(crate) unsafe fn count(
    env: sys::napi_env,
    value: sys::napi_value,
    what: &str,
) -> Result<isize> {
    // SAFETY: caller contract.
    let number = unsafe { number(env, value, what) }?;
    crate::args::count(what, number)
}

/// A napi status as a result.
fn check(status: sys::napi_status) -> Result<()> {
    match status {
        sys::Status::napi_ok => Ok(()),
        other => Err(Failure::internal(&format!(
            "N-API call failed: status {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static NUMBERS: RefCell<Slab<u32>> = const { RefCell::new(Slab::new(1)) };
    }

    #[test]
    fn handles_name_live_objects_only() {
        let a = Slot::new(&NUMBERS, Rc::new(1)).unwrap();
        let b = Slot::new(&NUMBERS, Rc::new(2)).unwrap();
        let get = |h: f64| NUMBERS.with_borrow(|s| s.get(h).map(|v| **v));
        assert_eq!(get(a.handle()), Some(1));
        assert_eq!(get(b.handle()), Some(2));
        let stale = a.handle();
        drop(a);
        assert_eq!(get(stale), None);
        // The slot is reused under a new generation: the old handle still misses.
        let c = Slot::new(&NUMBERS, Rc::new(3)).unwrap();
        assert_ne!(c.handle(), stale);
        assert_eq!(get(stale), None);
        assert_eq!(get(c.handle()), Some(3));
        for junk in [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1.5,
            4_294_967_296.0 * 7.0,
        ] {
            assert_eq!(get(junk), None);
        }
        assert!(c.handle() < 2f64.powi(53));
        // A handle of the other tag misses.
        assert_eq!(get(c.handle() - 4_294_967_296.0), None);
    }
}
