//! The completion mailbox's eventfd protocol (module docs: ordering), without librbd:
//! the test calls librbd's callback as librbd's thread would.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};

use super::*;

/// Whether the mailbox's eventfd would wake an epoll wait now.
fn readable(c: &Completions) -> bool {
    let mut fds = [PollFd::new(c.notifier.efd.as_fd(), PollFlags::POLLIN)];
    nix::poll::poll(&mut fds, PollTimeout::ZERO).unwrap_or(0) > 0
}

/// What librbd's thread does when operation `slot` completes.
fn complete(c: &Completions, slot: usize) {
    let arg = Box::new(CallbackArg {
        notifier: c.notifier.clone(),
        slot,
    });
    on_complete(std::ptr::null_mut(), Box::into_raw(arg).cast());
}

fn slots(c: &Completions) -> Vec<usize> {
    let mut out = Vec::new();
    c.drain(&mut out);
    out.iter().map(Done::slot).collect()
}

#[test]
fn a_completion_stays_readable_until_a_waiter_clears_it() {
    let c = Completions::new().expect("eventfd");
    assert!(!readable(&c), "nothing completed yet");
    complete(&c, 7);
    assert!(readable(&c));
    // A spinning poll group drains without a system call for the eventfd: the wake-up
    // stays for the group's next epoll wait (which reads it), so none is lost.
    assert_eq!(slots(&c), vec![7]);
    assert!(
        readable(&c),
        "drain leaves the eventfd to whoever sleeps on it"
    );
    assert_eq!(slots(&c), Vec::<usize>::new());
    // `wait` returns at once on a readable eventfd and clears it for the drain after.
    let t = Instant::now();
    c.wait(Duration::from_secs(30));
    assert!(t.elapsed() < Duration::from_secs(10), "readable: no wait");
    assert!(!readable(&c));
    // A completion after the clear makes it readable again.
    complete(&c, 8);
    complete(&c, 9);
    assert!(readable(&c));
    c.wait(Duration::from_secs(30));
    assert_eq!(slots(&c), vec![8, 9]);
    assert!(!readable(&c));
}

#[test]
fn wait_with_nothing_signalled_lasts_its_timeout() {
    let c = Completions::new().expect("eventfd");
    let t = Instant::now();
    c.wait(Duration::from_millis(50));
    assert!(
        t.elapsed() >= Duration::from_millis(40),
        "{:?}",
        t.elapsed()
    );
    assert!(!readable(&c));
    c.signal();
    assert!(readable(&c), "signal wakes a sleeping group");
    c.wait(Duration::ZERO);
    assert!(!readable(&c));
}
