//! The same code compiled against pingora-timeout and against keepcount-timeout: swapping crates
//! is changing the import. pingora's own documented behaviours, with millisecond durations.

macro_rules! compat_suite {
    ($krate:ident) => {
        mod $krate {
            use std::future::Ready;
            use std::time::{Duration, Instant};
            use $krate::fast_timeout::{FastTimeout, fast_sleep, fast_timeout};
            use $krate::timer::{TimerManager, TimerStub};
            use $krate::{
                Elapsed, Timeout, ToTimeout, TokioTimeout, sleep, timeout, tokio_timeout,
            };

            fn block_on<O>(future: impl std::future::Future<Output = O>) -> O {
                tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .expect("runtime")
                    .block_on(future)
            }

            #[test]
            fn signatures_match() {
                let _: fn(Duration, Ready<u8>) -> Timeout<Ready<u8>, FastTimeout> = timeout;
                let _: fn(Duration, Ready<u8>) -> Timeout<Ready<u8>, FastTimeout> = fast_timeout;
                let _: fn(Duration, Ready<u8>) -> Timeout<Ready<u8>, TokioTimeout> = tokio_timeout;
                let _: fn() = $krate::fast_timeout::pause_for_fork;
                let _: fn() = $krate::fast_timeout::unpause;
                let _: fn() -> TimerManager = TimerManager::new;
                let _: fn(&TimerManager, Duration) -> TimerStub = TimerManager::register_timer;
                let _: fn(&TimerManager) = TimerManager::pause_for_fork;
                let _: fn(&TimerManager) = TimerManager::unpause;
                let _: fn(Duration) -> TokioTimeout = <TokioTimeout as ToTimeout>::create;
                let _: TimerManager = Default::default();
                let _: Box<dyn std::error::Error> = Box::new(Elapsed);
                assert_eq!(Elapsed.to_string(), "Timeout Elapsed");
            }

            #[test]
            fn times_out() {
                let result = block_on(async {
                    let fut = tokio::time::sleep(Duration::from_secs(1000));
                    timeout(Duration::from_millis(20), fut).await
                });
                assert!(result.is_err());
            }

            #[test]
            fn returns_instantly() {
                assert_eq!(
                    block_on(timeout(Duration::from_secs(1), async { 1 })).unwrap(),
                    1
                );
            }

            #[test]
            fn returns_delayed_value() {
                let fut = async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    1
                };
                let to = timeout(Duration::from_secs(1000), fut);
                assert_eq!(block_on(to).unwrap(), 1);
            }

            #[test]
            fn sleeps() {
                let start = Instant::now();
                let fut = async {
                    sleep(Duration::from_millis(20)).await;
                    fast_sleep(Duration::from_millis(20)).await;
                    1
                };
                assert_eq!(
                    block_on(timeout(Duration::from_secs(1000), fut)).unwrap(),
                    1
                );
                assert!(start.elapsed() >= Duration::from_millis(40));
            }

            #[test]
            fn tokio_timeout_times_out() {
                let fut = std::future::pending::<()>();
                assert!(block_on(tokio_timeout(Duration::from_millis(5), fut)).is_err());
            }
        }
    };
}

compat_suite!(pingora_timeout);
compat_suite!(keepcount_timeout);
