//! Dropping a manager stops its clock thread; a live sink keeps it running.
//!
//! Counts the process's threads named `keepcount-clock` in `/proc`, so this file holds a single
//! test: no other test in this process starts clock threads.
#![cfg(target_os = "linux")]

use keepcount_timeout::timer::TimerManager;
use std::time::{Duration, Instant};

fn clock_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("procfs")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "keepcount-clock")
        .count()
}

/// Polls until there are `n` clock threads, for at most a second.
fn wait_for_clock_threads(n: usize) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        if clock_threads() == n {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

#[test]
fn dropping_the_last_handle_stops_the_clock_thread() {
    assert_eq!(clock_threads(), 0);
    let manager = TimerManager::new();
    assert_eq!(clock_threads(), 0, "the clock thread starts lazily");
    drop(manager.register_timer(Duration::from_secs(60)));
    assert!(wait_for_clock_threads(1));
    drop(manager);
    assert!(
        wait_for_clock_threads(0),
        "clock thread outlived its manager"
    );

    let manager = TimerManager::new();
    let sink = manager.deadline_sink(|| {});
    sink.register(Duration::from_secs(60));
    drop(manager);
    assert!(wait_for_clock_threads(1));
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        clock_threads(),
        1,
        "a sink keeps its manager's clock running"
    );
    drop(sink);
    assert!(wait_for_clock_threads(0), "clock thread outlived the sink");
}
