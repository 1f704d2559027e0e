//! Where passwords are checked: a few threads of their own, one check each at a time.
//!
//! An argon2 check allocates 19 MiB. On tokio's blocking pool every check could land
//! on another thread, and the C allocator keeps freed memory in the arena of the
//! thread that used it, so a process that had served N checks on N threads kept
//! N × 19 MiB. Here at most `slots` threads ever hash, so what argon2 holds, in use or
//! kept for reuse, is at most `slots` × 19 MiB, whatever the load.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

type PasswordJob = Box<dyn FnOnce() + Send>;

/// The right to run one check now, from [`PasswordChecks::try_slot`].
#[derive(Debug)]
pub struct CheckSlot(
    #[expect(dead_code, reason = "held, not read: frees the slot on drop")] OwnedSemaphorePermit,
);

#[derive(Debug)]
pub(crate) struct PasswordChecks {
    slots: Arc<Semaphore>,
    size: usize,
    /// Started on the first check (most states in tests never check a password).
    queue: OnceLock<SyncSender<PasswordJob>>,
}

impl PasswordChecks {
    pub fn new(slots: usize) -> Self {
        let size = slots.max(1);
        Self {
            slots: Arc::new(Semaphore::new(size)),
            size,
            queue: OnceLock::new(),
        }
    }

    /// A free slot, or `None` when every slot is busy (never waits).
    pub(crate) fn try_slot(&self) -> Option<CheckSlot> {
        self.slots.clone().try_acquire_owned().ok().map(CheckSlot)
    }

    /// Runs `check` on a checking thread; the slot is freed when it is done, even if
    /// the caller stopped waiting. `None` if the check panicked.
    pub async fn run<T: Send + 'static>(
        &self,
        slot: CheckSlot,
        check: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: PasswordJob = Box::new(move || {
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(check));
            drop(slot);
            if let Ok(value) = outcome {
                let _ = done.send(value);
            }
        });
        // Never full: a job holds its slot until it is done, and there are as many
        // places in the queue as slots.
        self.queue().try_send(job).ok()?;
        result.await.ok()
    }

    fn queue(&self) -> &SyncSender<PasswordJob> {
        self.queue.get_or_init(|| {
            let (send, receive) = sync_channel::<PasswordJob>(self.size);
            let receive = Arc::new(Mutex::new(receive));
            for i in 0..self.size {
                let receive = receive.clone();
                std::thread::Builder::new()
                    .name(format!("password-check-{i}"))
                    .spawn(move || work(&receive))
                    .expect("cannot start a password checking thread");
            }
            send
        })
    }
}

/// One checking thread: runs jobs until the [`PasswordChecks`] is dropped.
fn work(jobs: &Mutex<Receiver<PasswordJob>>) {
    loop {
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn checks_beyond_the_slots_are_refused_and_a_slot_frees_when_its_check_ends() {
        let checks = PasswordChecks::new(2);
        let a = checks.try_slot().unwrap();
        let b = checks.try_slot().unwrap();
        assert!(checks.try_slot().is_none());
        assert_eq!(checks.run(a, || 7).await, Some(7));
        let c = checks.try_slot().expect("freed");
        assert_eq!(checks.run(c, || panic!("boom")).await, None::<()>);
        assert!(checks.try_slot().is_some(), "freed after a panic too");
        drop(b);
    }

    #[tokio::test]
    async fn every_check_runs_on_one_of_the_slots_threads() {
        let checks = PasswordChecks::new(2);
        let mut names = std::collections::BTreeSet::new();
        for _ in 0..20 {
            let slot = checks.try_slot().unwrap();
            let name = checks
                .run(slot, || std::thread::current().name().map(str::to_string))
                .await
                .unwrap();
            names.insert(name.unwrap());
        }
        assert!(names.len() <= 2, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("password-check-")));
    }
}
