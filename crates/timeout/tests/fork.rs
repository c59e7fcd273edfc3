//! A real `fork()`: pause, fork, the child's timers fire on a freshly started clock thread (no
//! thread survives `fork()`), and the parent's timers keep working after `unpause`.
#![cfg(unix)]

use keepcount_timeout::fast_timeout::{fast_sleep, pause_for_fork, timer_manager, unpause};
use std::time::{Duration, Instant};

/// Child exit codes, so a failure in the child says what went wrong.
const CHILD_OK: i32 = 0;
const CHILD_PANICKED: i32 = 1;
const CHILD_FIRED_EARLY: i32 = 2;
const CHILD_FIRED_LATE: i32 = 3;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

fn child_main() -> i32 {
    std::panic::catch_unwind(|| {
        unpause();
        let start = Instant::now();
        runtime().block_on(fast_sleep(Duration::from_millis(30)));
        let waited = start.elapsed();
        if waited < Duration::from_millis(30) {
            CHILD_FIRED_EARLY
        } else if waited > Duration::from_secs(1) {
            // The watchdog delay is 2 s: firing well before it proves `unpause` restarted the
            // clock at once instead of waiting for the watchdog.
            CHILD_FIRED_LATE
        } else {
            CHILD_OK
        }
    })
    .unwrap_or(CHILD_PANICKED)
}

/// Waits up to `limit` for `pid`; kills it and returns `None` on timeout.
fn wait_for(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: plain syscall on our own child with a valid out-pointer.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            assert!(
                libc::WIFEXITED(status),
                "child did not exit normally: {status}"
            );
            return Some(libc::WEXITSTATUS(status));
        }
        if start.elapsed() > limit {
            // SAFETY: as above.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn timers_work_in_parent_and_child_after_fork() {
    let rt = runtime();
    // Start the global clock thread, so the child inherits the heartbeat of a thread it lacks.
    rt.block_on(fast_sleep(Duration::ZERO));
    let start = Instant::now();
    let before_fork = timer_manager().register_timer(Duration::from_millis(60));

    pause_for_fork();
    // SAFETY: the child only allocates, runs a current-thread runtime and leaves with `_exit`,
    // never returning into the test harness; glibc's malloc is fork-safe.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = child_main();
        // SAFETY: `_exit` skips atexit handlers and the harness, which the child must not run.
        unsafe { libc::_exit(code) };
    }
    unpause();
    assert!(pid > 0, "fork failed");

    rt.block_on(before_fork.poll());
    assert!(start.elapsed() >= Duration::from_millis(60));
    let again = Instant::now();
    rt.block_on(fast_sleep(Duration::from_millis(20)));
    let waited = again.elapsed();
    assert!(waited >= Duration::from_millis(20) && waited < Duration::from_millis(500));

    assert_eq!(wait_for(pid, Duration::from_secs(10)), Some(CHILD_OK));
}
