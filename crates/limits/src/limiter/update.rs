//! The limiter's updates: key-table replacement, quota changes, inserts and removals. Each one
//! runs under the writer lock; those that change the key set build the next table on the side,
//! move every bucket into it under the bucket's lock, publish it and wait for the checks still
//! reading the old one (see `table.rs` and the module docs of [`limiter`](super)).

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::arena::Interned;
use super::bucket::State;
use super::table::{Entry, Locked, Table};
use super::writer::Writer;
use super::{Limiter, LimiterError, Quota};
use crate::clock::Clock;

impl<K: Hash + Eq, C: Clock> Limiter<K, C> {
    /// Replaces the key table at once: keys that stay keep their bucket and its tokens (capped
    /// to their new quota), added keys start with a full bucket of their own quota, removed keys
    /// fall to the best-effort bucket. No key ever gets another key's tokens.
    ///
    /// ```
    /// use keepcount_limits::limiter::{Limit, Limiter, Quota};
    ///
    /// let one = Quota::new(Some(Limit::per_second(0, 1)), None);
    /// let limiter = Limiter::new(Quota::DENY_ALL);
    /// limiter.replace_keys([(1, one), (2, one)]).unwrap();
    /// assert!(limiter.check_one(&1).is_allowed());
    /// limiter.replace_keys([(1, one), (3, one)]).unwrap();
    /// assert!(!limiter.check_one(&1).is_allowed()); // kept its empty bucket
    /// assert!(!limiter.check_one(&2).is_allowed()); // removed: best effort denies
    /// assert!(limiter.check_one(&3).is_allowed()); // added: full
    /// ```
    ///
    /// # Errors
    /// [`LimiterError::DuplicateKey`] if `entries` names a key twice,
    /// [`LimiterError::TooManyKeys`] beyond `u32::MAX − 1` keys; the limiter is then unchanged.
    ///
    /// # Performance
    /// `O(keys)`: the new table is built on the side, then each bucket of the old one is moved
    /// into it under its lock. Checks proceed meanwhile and never wait for the update; a check
    /// on a bucket already moved follows it to the new table. Returns once no check still reads
    /// the old table, which this call then frees. While it runs, both tables are in memory.
    pub fn replace_keys<I>(&self, entries: I) -> Result<(), LimiterError>
    where
        I: IntoIterator<Item = (K, Quota)>,
    {
        self.replace_keys_at(entries, self.clock.now_nanos())
    }

    /// [`replace_keys`](Self::replace_keys) at clock reading `now`.
    pub fn replace_keys_at<I>(&self, entries: I, now: u64) -> Result<(), LimiterError>
    where
        I: IntoIterator<Item = (K, Quota)>,
    {
        let mut writer = self.writer.lock();
        let current = self.table.load_full();
        self.rebuild(&mut writer, current, entries, now)
    }

    /// Changes one key's quota in place, keeping its tokens (capped to the new burst).
    ///
    /// ```
    /// use keepcount_limits::limiter::{Limit, Limiter, LimiterError, Quota};
    ///
    /// let limiter = Limiter::new(Quota::DENY_ALL);
    /// limiter.replace_keys([("k", Quota::new(Some(Limit::per_second(0, 5)), None))]).unwrap();
    /// limiter.set_quota("k", Quota::new(Some(Limit::per_second(0, 1)), None)).unwrap();
    /// assert!(limiter.check_one("k").is_allowed());
    /// assert!(!limiter.check_one("k").is_allowed());
    /// assert_eq!(limiter.set_quota("nope", Quota::UNLIMITED), Err(LimiterError::UnknownKey));
    /// ```
    ///
    /// # Errors
    /// [`LimiterError::UnknownKey`] if `key` is not in the table.
    pub fn set_quota<Q>(&self, key: &Q, quota: Quota) -> Result<(), LimiterError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.set_quota_at(key, quota, self.clock.now_nanos())
    }

    /// [`set_quota`](Self::set_quota) at clock reading `now`.
    pub fn set_quota_at<Q>(&self, key: &Q, quota: Quota, now: u64) -> Result<(), LimiterError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut writer = self.writer.lock();
        let current = self.table.load();
        // Under the writer lock the current table's entries are never moved.
        let entry = current
            .find(self.hasher.hash_one(key), key)
            .ok_or(LimiterError::UnknownKey)?;
        let quota_id = writer.intern(&self.quotas, quota)?;
        let old = self.change_quota(&writer, &current, &mut entry.lock(), quota, quota_id, now);
        writer.release(old);
        Ok(())
    }

    /// Changes the best-effort quota in place, keeping its tokens (capped to the new burst).
    pub fn set_best_effort(&self, quota: Quota) {
        self.set_best_effort_at(quota, self.clock.now_nanos());
    }

    /// [`set_best_effort`](Self::set_best_effort) at clock reading `now`.
    pub fn set_best_effort_at(&self, quota: Quota, now: u64) {
        let _writer = self.writer.lock();
        self.best_effort.lock().set_quota(quota, now);
    }

    /// Sets the overall quota over all traffic (`None`: no overall limit). Changing a quota keeps
    /// the overall tokens (capped); setting one where there was none starts full.
    ///
    /// ```
    /// use keepcount_limits::limiter::{Limit, Limiter, Quota};
    ///
    /// let limiter: Limiter<u8> = Limiter::new(Quota::UNLIMITED);
    /// limiter.set_overall(Some(Quota::new(Some(Limit::per_second(0, 2)), None)));
    /// assert!(limiter.check_one(&1).is_allowed());
    /// assert!(limiter.check_one(&2).is_allowed());
    /// assert!(!limiter.check_one(&3).is_allowed());
    /// ```
    pub fn set_overall(&self, quota: Option<Quota>) {
        self.set_overall_at(quota, self.clock.now_nanos());
    }

    /// [`set_overall`](Self::set_overall) at clock reading `now`.
    pub fn set_overall_at(&self, quota: Option<Quota>, now: u64) {
        let _writer = self.writer.lock();
        let quota = quota.unwrap_or(Quota::UNLIMITED);
        self.overall.lock().set_quota(quota, now);
        // Relaxed: the flag is only a hint to skip the overall lock. Whatever a check reads, the
        // overall quota is read under that lock, and an overall bucket that limits nothing (flag
        // false) admits everything, so a stale flag only moves the check to just before or just
        // after this update, never breaks a quota.
        self.overall_limited
            .store(quota.is_limited(), Ordering::Relaxed);
    }

    /// Adds `key` with a full bucket of `quota`, or changes its quota in place (keeping its
    /// tokens, capped) if it is already in the table.
    ///
    /// # Errors
    /// [`LimiterError::TooManyKeys`] beyond `u32::MAX − 1` keys.
    ///
    /// # Performance
    /// Adding rebuilds the table as [`replace_keys`](Self::replace_keys) does, `O(keys)` (and a
    /// clone of every key): add many keys with one `replace_keys`.
    pub fn insert(&self, key: K, quota: Quota) -> Result<(), LimiterError>
    where
        K: Clone,
    {
        self.insert_at(key, quota, self.clock.now_nanos())
    }

    /// [`insert`](Self::insert) at clock reading `now`.
    pub fn insert_at(&self, key: K, quota: Quota, now: u64) -> Result<(), LimiterError>
    where
        K: Clone,
    {
        let mut writer = self.writer.lock();
        let current = self.table.load_full();
        if let Some(entry) = current.find(self.hasher.hash_one(&key), &key) {
            let quota_id = writer.intern(&self.quotas, quota)?;
            let old = self.change_quota(&writer, &current, &mut entry.lock(), quota, quota_id, now);
            writer.release(old);
            return Ok(());
        }
        let entries = self.configured(&writer, &current);
        self.rebuild(
            &mut writer,
            current,
            entries.into_iter().chain([(key, quota)]),
            now,
        )
    }

    /// Removes `key` from the table: it falls to the best-effort bucket.
    ///
    /// # Errors
    /// [`LimiterError::UnknownKey`] if `key` is not in the table.
    ///
    /// # Performance
    /// Rebuilds the table as [`replace_keys`](Self::replace_keys) does, `O(keys)` (and a clone
    /// of every key that stays).
    pub fn remove<Q>(&self, key: &Q) -> Result<(), LimiterError>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ?Sized,
    {
        let mut writer = self.writer.lock();
        let current = self.table.load_full();
        if current.find(self.hasher.hash_one(key), key).is_none() {
            return Err(LimiterError::UnknownKey);
        }
        let mut entries = self.configured(&writer, &current);
        entries.retain(|(k, _)| k.borrow() != key);
        self.rebuild(&mut writer, current, entries, self.clock.now_nanos())
    }

    /// Every key of `table` with its quota, for an update that rebuilds it with a key more or
    /// fewer.
    fn configured(&self, writer: &Writer, table: &Table<K>) -> Vec<(K, Quota)>
    where
        K: Clone,
    {
        table
            .iter()
            // SAFETY: the caller holds the writer lock (it lent us `writer`).
            .map(|entry| {
                (
                    entry.key().clone(),
                    writer.quota(unsafe { entry.writer_quota_id() }),
                )
            })
            .collect()
    }

    /// Replaces `current` (the published table) by one holding `entries`: builds it, interning
    /// every quota first so that a failure leaves the limiter as it was, then moves the buckets.
    fn rebuild<I>(
        &self,
        writer: &mut Writer,
        current: Arc<Table<K>>,
        entries: I,
        now: u64,
    ) -> Result<(), LimiterError>
    where
        I: IntoIterator<Item = (K, Quota)>,
    {
        let entries = entries.into_iter();
        // A size hint too large for a table is only a hint: grow as entries arrive instead.
        let mut next =
            Table::with_capacity(entries.size_hint().0).or_else(|_| Table::with_capacity(0))?;
        let mut interned = Vec::new();
        let mut any_wide = false;
        let built = (|| {
            for (key, quota) in entries {
                let hash = self.hasher.hash_one(&key);
                if next.find(hash, &key).is_some() {
                    return Err(LimiterError::DuplicateKey);
                }
                let id = writer.intern(&self.quotas, quota)?;
                interned.push(id);
                any_wide |= Interned::new(quota).wide;
                // Full, as an added key starts; a key that stays gets its bucket in `migrate`.
                let entry = Entry::new(key, id, State::full(&quota, now));
                next.insert(hash, entry, |e| self.hasher.hash_one(e.key()))?;
            }
            Ok(())
        })();
        if let Err(err) = built {
            interned.into_iter().for_each(|id| writer.release(id));
            return Err(err);
        }
        if any_wide {
            // Full buckets of wide quotas keep their high halves in the table's side map, which
            // needs the entries' final addresses: only now are they known.
            for entry in next.iter() {
                let mut locked = entry.lock();
                let id = locked.quota_id();
                let quota = writer.quota(id);
                if Interned::new(quota).wide {
                    next.write(&mut locked, State::full(&quota, now), true);
                }
            }
        }
        self.migrate(writer, current, next, now);
        Ok(())
    }

    /// Moves every bucket of `current` (the published table) to the same key's entry in `next`,
    /// converting it if the key's quota changed, marks it moved and releases its quota; then
    /// publishes `next`. See `table.rs` for why checks never wait for this.
    fn migrate(&self, writer: &mut Writer, current: Arc<Table<K>>, next: Table<K>, now: u64) {
        let next = Arc::new(next);
        // The published table is replaced once: under the writer lock it has no successor yet.
        let linked = current.link(next.clone());
        debug_assert!(linked, "the published table was already replaced");
        // Each bucket is locked only to copy it: its key's entry in `next` is found before, so
        // that a check waiting on the lock spins for a few instructions instead of parking (and
        // keeping the old table alive until the scheduler wakes it). Buckets busy with a check
        // are moved last, not waited for in turn: their holder may be descheduled.
        let step = Step {
            current: &current,
            next: &next,
            now,
        };
        let mut busy = Vec::new();
        for entry in current.iter() {
            let key = entry.key();
            let target = next.find(self.hasher.hash_one(key), key);
            if !self.move_bucket(writer, step, entry, Entry::try_lock, target) {
                busy.push((entry, target));
            }
        }
        for (entry, target) in busy {
            self.move_bucket(writer, step, entry, lock_now, target);
        }
        self.publish(next, current);
    }

    /// Moves the locked bucket of `current` to `target`, its key's entry in `next` (`None` if
    /// the key goes), converting it if the key's quota changed; marks it moved and releases its
    /// quota. Everything about the quotas is worked out before `locked` is taken (`lock`), so
    /// the bucket is held only while it is copied.
    fn move_bucket<'t>(
        &self,
        writer: &mut Writer,
        step: Step<'_, K>,
        entry: &'t Entry<K>,
        lock: impl FnOnce(&'t Entry<K>) -> Option<Locked<'t, K>>,
        target: Option<&Entry<K>>,
    ) -> bool {
        let Step { current, next, now } = step;
        // SAFETY: we are the writer (we hold `writer`).
        let old_id = unsafe { entry.writer_quota_id() };
        let old_quota = writer.quota(old_id);
        let old_wide = Interned::new(old_quota).wide;
        // SAFETY: as above.
        let target = target.map(|target| (target, unsafe { target.writer_quota_id() }));
        let new = target.map(|(_, id)| (id, writer.quota(id)));
        let new_wide = new.is_some_and(|(_, quota)| Interned::new(quota).wide);
        let Some(mut locked) = lock(entry) else {
            return false;
        };
        if let (Some((target, id)), Some((_, quota))) = (target, new) {
            let mut state = current.read(&locked, old_wide);
            if id != old_id {
                state.set_quota(&old_quota, &quota, now);
            }
            next.write(&mut target.lock(), state, new_wide);
        }
        locked.set_moved();
        drop(locked);
        // No check reads this quota through the moved entry any more.
        writer.release(old_id);
        true
    }

    /// Puts `quota` (interned as `quota_id`) in force on the locked bucket of `table` as of
    /// `now`; returns the id of the quota it had, for the caller to release.
    fn change_quota(
        &self,
        writer: &Writer,
        table: &Table<K>,
        locked: &mut Locked<'_, K>,
        quota: Quota,
        quota_id: u32,
        now: u64,
    ) -> u32 {
        let old = locked.quota_id();
        if old != quota_id {
            let old_quota = writer.quota(old);
            let (was_wide, wide) = (Interned::new(old_quota).wide, Interned::new(quota).wide);
            let mut state = table.read(locked, was_wide);
            state.set_quota(&old_quota, &quota, now);
            table.write(locked, state, wide);
            locked.set_quota_id(quota_id);
            if was_wide && !wide {
                table.forget_wide(locked);
            }
        }
        old
    }

    /// Publishes `next` in place of `current` and returns once no check reads `current`, which
    /// it then frees.
    fn publish(&self, next: Arc<Table<K>>, current: Arc<Table<K>>) {
        drop(current);
        let mut old = self.table.swap(next);
        // `swap` has turned every check's borrowed snapshot of the old table into a counted
        // reference, so the old table is ours alone once the count drops to one: the checks that
        // still hold it finish within a lookup and a bucket update. Waiting here, not dropping a
        // reference, keeps the freeing of a large table off the checks' path.
        loop {
            match Arc::try_unwrap(old) {
                Ok(table) => return drop(table),
                Err(still_shared) => {
                    old = still_shared;
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// The tables a migration moves buckets between, and its clock reading.
struct Step<'a, K> {
    current: &'a Table<K>,
    next: &'a Table<K>,
    now: u64,
}

impl<K> Clone for Step<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Step<'_, K> {}

/// `entry`'s lock, waiting for it: what a bucket busy on the first pass gets.
fn lock_now<K>(entry: &Entry<K>) -> Option<Locked<'_, K>> {
    Some(entry.lock())
}
