//! What a binding object holds of its native value, and the lifetime every such class shares.
//!
//! The value is reference-counted twice: by the object and by its entry in a per-thread
//! [`Slab`], through which the fast paths reach it by handle ([`crate::raw`]). The object
//! reports the native memory it keeps alive to V8 ([`crate::memory`]) so that V8 collects dropped
//! objects as it would collect a `Float64Array` of that size. `close()` empties the slot and drops
//! the object's reference, so the value goes at once (unmapping a segment, giving back a shared
//! in-flight contribution) rather than when V8 gets round to collecting the object.

use crate::error::{Failure, Result};
use crate::memory::External;
use crate::raw::{Slab, Slot};
use napi::Env;
use std::cell::RefCell;
use std::rc::Rc;
use std::thread::LocalKey;

/// A binding object's native value: `None` once closed.
pub(crate) struct Held<T: 'static> {
    value: Option<Rc<T>>,
    slot: Slot<T>,
    /// A cell: a value whose size changes (a limiter's key table) renews its report through `&self`.
    memory: RefCell<External>,
}

impl<T: 'static> Held<T> {
    /// `value`, entered in `slab` for the fast paths, and reported to V8 as `bytes` of native
    /// memory once it is.
    pub(crate) fn new(
        env: &Env,
        slab: &'static LocalKey<RefCell<Slab<T>>>,
        value: T,
        bytes: usize,
    ) -> Result<Self> {
        let value = Rc::new(value);
        let slot = Slot::new(slab, Rc::clone(&value))?;
        Ok(Self {
            value: Some(value),
            slot,
            memory: RefCell::new(External::report(env, bytes)),
        })
    }

    /// The value; a failure after [`close`](Self::close) (`lib/` never calls a closed object).
    pub(crate) fn get(&self) -> Result<&T> {
        self.value
            .as_deref()
            .ok_or_else(|| Failure::internal("a native object used after close()"))
    }

    /// The value, or `None` once closed.
    pub(crate) fn get_open(&self) -> Option<&T> {
        self.value.as_deref()
    }

    /// Reports `bytes` to V8 in place of the last report (for a value that grew or shrank);
    /// nothing once closed.
    pub(crate) fn report(&self, env: &Env, bytes: usize) {
        if self.value.is_some() {
            let mut memory = self.memory.borrow_mut();
            memory.release(env);
            *memory = External::report(env, bytes);
        }
    }

    /// The handle the fast paths take; names nothing once closed.
    pub(crate) fn handle(&self) -> f64 {
        self.slot.handle()
    }

    /// Drops the value now (the slab held the only other reference) and gives V8 its memory
    /// report back: `close()`, and the object's finalizer. Idempotent.
    pub(crate) fn close(&mut self, env: &Env) {
        self.slot.vacate();
        self.value = None;
        self.memory.get_mut().release(env);
    }
}
