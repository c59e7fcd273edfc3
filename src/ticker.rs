//! `Ticker`: one per JavaScript thread, delivering `keepcount-timeout` deadlines to JavaScript.
//!
//! A [`DeadlineSink`] of the process-wide timer manager holds the thread's deadlines on the
//! 10 ms grid. When some expire, the clock thread's `notify` makes one non-blocking call of a
//! `ThreadsafeFunction`; on the JavaScript thread, the callback (`lib/native.ts`) drains the
//! expired deadlines and fires the waiters it filed under them. Waiters never leave JavaScript.
//!
//! # Keep-alive
//! The threadsafe function is created weak (unref'd): it keeps the event loop alive only
//! between [`Ticker::keep_alive`] and [`Ticker::let_exit`], which the adapter calls while at
//! least one armed handle is ref'd, so pending timeouts hold the process open like `setTimeout`
//! and nothing else does.
//!
//! # Teardown
//! A worker thread's environment can end with deadlines pending. An env cleanup hook then drops
//! the sink (after which its `notify` is never called again, a call in progress is waited out)
//! and aborts the threadsafe function, so the clock thread never calls into a dead environment.
//! Dropping the `Ticker` (garbage collection) does the same early.

use crate::error::{Failure, map_error};
use keepcount_timeout::DeadlineSink;
use keepcount_timeout::fast_timeout::{self, timer_manager};
use keepcount_timeout::sink::Deadline;
use napi::bindgen_prelude::Function;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Result, Status, sys};
use napi_derive::napi;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Weak (unref'd at creation), no arguments, unbounded queue (the sink queues at most one call).
type Wakeup = ThreadsafeFunction<(), (), (), Status, false, true>;

/// What lives exactly as long as the environment may be called into.
struct Live {
    sink: DeadlineSink,
    /// Also held by the sink's `notify`, hence shared.
    wakeup: Arc<Wakeup>,
}

impl Live {
    /// Drops the sink first (no `notify` after this), then aborts the wake-up function.
    fn shut_down(self) {
        // Dropping the sink drops its `notify` and with it the other handle on `wakeup`.
        drop(self.sink);
        if let Ok(wakeup) = Arc::try_unwrap(self.wakeup) {
            // `abort` is deprecated in favour of dropping every handle, which releases the
            // function but still runs a wake-up already queued; aborting discards it.
            #[allow(deprecated)]
            let _ = wakeup.abort();
        }
    }
}

/// The deadline delivery of one JavaScript thread. `lib/native.ts` creates one per thread.
#[napi]
pub struct Ticker {
    /// Shared with the env cleanup hook; `None` once shut down.
    live: Rc<RefCell<Option<Live>>>,
}

#[napi]
impl Ticker {
    /// A ticker calling `onExpired()` on this thread whenever deadlines have expired; it then
    /// calls `drain()`. The call can be spurious (nothing to drain).
    #[napi(constructor, catch_unwind)]
    pub fn new(env: &Env, on_expired: Function<(), ()>) -> Result<Self> {
        let wakeup: Arc<Wakeup> = Arc::new(
            on_expired
                .build_threadsafe_function::<()>()
                .weak::<true>()
                .build_callback(|_| Ok(()))?,
        );
        let notify = Arc::clone(&wakeup);
        let sink = timer_manager().deadline_sink(move || {
            // Runs on the clock thread: never block. An error means the environment is closing,
            // when there is nobody left to wake.
            let _ = notify.call((), ThreadsafeFunctionCallMode::NonBlocking);
        });
        let live = Rc::new(RefCell::new(Some(Live { sink, wakeup })));
        let hook_live = Rc::clone(&live);
        env.add_env_cleanup_hook((), move |()| {
            if let Some(live) = hook_live.try_borrow_mut().ok().and_then(|mut l| l.take()) {
                live.shut_down();
            }
        })?;
        Ok(Self { live })
    }

    /// Registers a deadline at least `ms` milliseconds from now (rounded up to the next whole
    /// nanosecond, then up to the 10 ms grid) and returns its id: the grid point in ms on the
    /// timer manager's clock. Deadlines that round to the same point share one id and expire
    /// together. `ms` <= 0 or NaN means as soon as possible.
    #[napi(catch_unwind)]
    pub fn register(&self, env: &Env, ms: f64) -> Result<f64> {
        // `as` saturates: NaN and negatives become 0, absurd values u64::MAX ns (584 years).
        let nanos = (ms * 1e6).ceil() as u64;
        self.with_sink(env, |sink| {
            // Grid points are whole ms since the manager started: exact in a double for 285,000 years.
            sink.register(Duration::from_nanos(nanos)).as_millis() as f64
        })
    }

    /// Forgets the deadline `id` (as `register` returned it) if it is still pending; returns
    /// whether it was. For a deadline nobody waits for any more: left registered, it would stay in
    /// the timer manager until it expires, however far off. An expired, undrained one is still
    /// drained.
    #[napi(catch_unwind)]
    pub fn cancel(&self, env: &Env, id: f64) -> Result<bool> {
        // `as` saturates (NaN is 0): an id `register` never returned matches no deadline.
        let deadline = Deadline::from_millis(id as u64);
        self.with_sink(env, |sink| sink.cancel(deadline))
    }

    /// The ids of the deadlines that expired since the last call, ascending.
    #[napi(catch_unwind)]
    pub fn drain(&self, env: &Env) -> Result<Vec<f64>> {
        self.with_sink(env, |sink| {
            sink.drain_expired()
                .into_iter()
                .map(|deadline: Deadline| deadline.as_millis() as f64)
                .collect()
        })
    }

    /// Keeps the event loop alive until `letExit()`.
    #[napi(catch_unwind)]
    pub fn keep_alive(&self, env: &Env) -> Result<()> {
        self.with_live(env, |live, env| {
            // SAFETY: the function is alive (not aborted: `live` exists) and this is its env.
            check(unsafe { sys::napi_ref_threadsafe_function(env.raw(), live.wakeup.raw()) })
        })
    }

    /// Lets the event loop exit even with deadlines pending.
    #[napi(catch_unwind)]
    pub fn let_exit(&self, env: &Env) -> Result<()> {
        self.with_live(env, |live, env| {
            // SAFETY: as in keep_alive.
            check(unsafe { sys::napi_unref_threadsafe_function(env.raw(), live.wakeup.raw()) })
        })
    }
}

impl Ticker {
    fn with_sink<T>(&self, env: &Env, f: impl FnOnce(&DeadlineSink) -> T) -> Result<T> {
        self.with_live(env, |live, _| Ok(f(&live.sink)))
    }

    fn with_live<T>(&self, env: &Env, f: impl FnOnce(&Live, &Env) -> Result<T>) -> Result<T> {
        let live = self.live.try_borrow().map_err(|_| shut_down(env))?;
        match live.as_ref() {
            Some(live) => f(live, env),
            None => Err(shut_down(env)),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        if let Some(live) = self.live.try_borrow_mut().ok().and_then(|mut l| l.take()) {
            live.shut_down();
        }
    }
}

/// A napi status as a result.
fn check(status: sys::napi_status) -> Result<()> {
    match status {
        sys::Status::napi_ok => Ok(()),
        other => Err(napi::Error::from_status(Status::from(other))),
    }
}

/// The error for a ticker whose environment is shutting down.
fn shut_down(env: &Env) -> napi::Error {
    map_error(
        env,
        Failure::invalid_type("The ticker", "alive (its environment is shutting down)"),
    )
}

/// The timer manager's clock: milliseconds (with their fraction) since it started, whose
/// multiples of 10 are its grid points. `lib/native.cts` puts `timeout`'s grid on it, so that a
/// deadline it rounded is not rounded up again onto a grid of another origin (up to a tick later).
#[napi]
pub fn timer_elapsed_ms() -> f64 {
    timer_manager().elapsed().as_nanos() as f64 / 1e6
}

thread_local! {
    /// Whether this JavaScript thread paused the timer manager and has not unpaused it.
    static PAUSED_HERE: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread's environment has the cleanup hook that unpauses for it.
    static UNPAUSE_HOOKED: Cell<bool> = const { Cell::new(false) };
}

/// JavaScript threads paused now, each counted once however often it paused (the low 32 bits),
/// and how many pauses were ever counted (the high 32 bits, wrapping): the timer manager (one per
/// process) stays paused until the last of them unpauses. A flag alone let one worker's
/// `pauseForFork()`/`unpause()` pair end another thread's pause; the generation lets the last
/// unpause see a pause-and-unpause that came and went while it cleared the flag (see
/// [`end_pause`]).
static PAUSES: AtomicU64 = AtomicU64::new(0);
/// One more paused thread and one more generation, in [`PAUSES`].
const ONE_PAUSE: u64 = (1 << 32) | 1;
/// The paused-thread count of a [`PAUSES`] word.
const fn paused_threads(word: u64) -> u64 {
    word & 0xffff_ffff
}
/// The process that counted [`PAUSES`]: in a fork child, where only the forking thread lives on,
/// the other threads' pauses are gone with them.
static PAUSED_IN: AtomicU32 = AtomicU32::new(0);

/// pingora-timeout's `pause_for_fork` for the process-wide timer manager: the clock thread takes
/// no more locks; waits two ticks. Call right before `fork()`. The pause is the whole process's,
/// so a worker thread that ends while it holds one (terminated between the two calls) unpauses
/// as its environment is torn down: otherwise every other thread's timers would wait for good.
#[napi(catch_unwind)]
pub fn pause_for_fork(env: &Env) -> Result<()> {
    if !UNPAUSE_HOOKED.get() {
        env.add_env_cleanup_hook((), |()| {
            if PAUSED_HERE.replace(false) {
                end_pause();
            }
        })?;
        UNPAUSE_HOOKED.set(true);
    }
    let first = !PAUSED_HERE.replace(true);
    if forked_since_pause() {
        // A fork child: the parent's other pausing threads are gone, their pauses with them.
        PAUSES.store(0, Ordering::SeqCst);
        PAUSED_IN.store(std::process::id(), Ordering::SeqCst);
        PAUSES.fetch_add(ONE_PAUSE, Ordering::SeqCst);
    } else if first {
        // SeqCst: the count and its process are read together by `end_pause` in another thread.
        PAUSED_IN.store(std::process::id(), Ordering::SeqCst);
        PAUSES.fetch_add(ONE_PAUSE, Ordering::SeqCst);
    }
    fast_timeout::pause_for_fork();
    Ok(())
}

/// pingora-timeout's `unpause`: call right after `fork()`, in parent and child. Unpauses the
/// timer manager once every thread that paused it has unpaused (or ended); a thread that did not
/// pause changes nothing, except in a fork child, where it ends the pause the child inherited
/// (the parent's other threads, which held it too, did not come along).
#[napi(catch_unwind)]
pub fn unpause() {
    if PAUSED_HERE.replace(false) || forked_since_pause() {
        end_pause();
    }
}

/// Whether this process is a fork child of the one that counted the pauses.
fn forked_since_pause() -> bool {
    paused_threads(PAUSES.load(Ordering::SeqCst)) > 0
        && PAUSED_IN.load(Ordering::SeqCst) != std::process::id()
}

/// One paused thread is done: the last one (or any, in a fork child) unpauses the manager.
///
/// The last one clears the manager's flag before its count reaches 0, and sets it again if the
/// word moved meanwhile: a thread that paused in between (count up), or paused and unpaused again
/// (same count, next generation), must not find its pause undone or the manager left paused.
fn end_pause() {
    if forked_since_pause() {
        PAUSES.store(0, Ordering::SeqCst);
        fast_timeout::unpause();
        return;
    }
    let mut word = PAUSES.load(Ordering::SeqCst);
    loop {
        let count = paused_threads(word);
        // Never below 0: only a thread that counted itself in gets here.
        if count == 0 {
            return;
        }
        if count == 1 {
            fast_timeout::unpause();
        }
        // Takes one off the count, keeping the generation.
        match PAUSES.compare_exchange(word, word - 1, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => return,
            Err(now) => {
                if count == 1 {
                    // Another thread paused while this one was unpausing: pause again for it.
                    fast_timeout::pause_for_fork();
                }
                word = now;
            }
        }
    }
}
