//! The limiter's updates: key-table replacement, quota changes, inserts and removals. Each one
//! runs under the writer lock, builds the next table on the side, publishes it and waits for the
//! checks still reading the old one (see the module docs of [`limiter`](super)).

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::bucket::State;
use super::slots::{Interned, Wide};
use super::writer::Writer;
use super::{Limiter, LimiterError, Quota, Table};
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
    /// `O(keys)`; checks proceed meanwhile, on the old table until the new one is swapped in.
    /// Returns once no check still reads the old table; only then are the slots of removed keys
    /// reused.
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
        let writer = &mut *writer;
        let fresh_from = writer.next_slot;
        let current = self.table.load_full();
        let entries = entries.into_iter();
        // A size hint too large for a table is only a hint: grow as entries arrive instead.
        let mut next = Table::with_capacity(entries.size_hint().0).unwrap_or_else(|_| Table::new());
        // (slot, quota) of keys that stay and of keys that arrive.
        let mut kept = Vec::new();
        let mut fresh = Vec::new();
        let built = (|| {
            for (key, quota) in entries {
                let hash = self.hasher.hash_one(&key);
                if self.find(&next, hash, &key).is_some() {
                    return Err(LimiterError::DuplicateKey);
                }
                let id = match self.find(&current, hash, &key) {
                    Some(id) => {
                        kept.push((id, quota));
                        id
                    }
                    None => {
                        let id = writer.alloc_slot(&self.slots)?;
                        fresh.push((id, quota));
                        if let Some(slot) = self.slots.get(id) {
                            // SAFETY: a slot just allocated is named by no published table, and
                            // it held a key exactly if it was handed out before this update.
                            unsafe { slot.set_key(key, writer.had_key(id, fresh_from)) };
                        }
                        id
                    }
                };
                next.insert(hash, id)?;
            }
            Ok(())
        })();
        // Intern every quota before changing anything, so a failure leaves the limiter as it was.
        let interned = built.and_then(|()| {
            let mut ids = Vec::with_capacity(kept.len() + fresh.len());
            for &(_, quota) in kept.iter().chain(&fresh) {
                match writer.intern(&self.quotas, quota) {
                    Ok(id) => ids.push(id),
                    Err(err) => {
                        ids.into_iter().for_each(|id| writer.release(id));
                        return Err(err);
                    }
                }
            }
            Ok(ids)
        });
        let quota_ids = match interned {
            Ok(ids) => ids,
            Err(err) => {
                // The new slots hold keys now, but no table names them: free for reuse.
                writer.free_slots.extend(fresh.iter().map(|&(id, _)| id));
                return Err(err);
            }
        };
        let (kept_ids, fresh_ids) = quota_ids.split_at(kept.len());
        for (&(id, quota), &quota_id) in fresh.iter().zip(fresh_ids) {
            if let Some(slot) = self.slots.get(id) {
                let high = self.high_alloc(id, Interned::new(quota).wide);
                slot.lock().write(State::full(&quota, now), quota_id, high);
            }
        }
        // Checks on the old table see the stayers' new quotas too: both tables name the same slots.
        let mut stays = vec![false; writer.next_slot as usize];
        for (&(id, quota), &quota_id) in kept.iter().zip(kept_ids) {
            stays[id as usize] = true;
            let old = self.update_slot(writer, id, quota, quota_id, now);
            writer.release(old);
        }
        let removed: Vec<u32> = current.ids().filter(|&id| !stays[id as usize]).collect();
        drop(current);
        self.publish(next);
        self.free_slots(writer, removed);
        Ok(())
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
        let table = self.table.load();
        let id = self
            .find(&table, self.hasher.hash_one(key), key)
            .ok_or(LimiterError::UnknownKey)?;
        let quota_id = writer.intern(&self.quotas, quota)?;
        let old = self.update_slot(&writer, id, quota, quota_id, now);
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
    /// Adding copies the table of indexes, `O(keys)`: add many keys with one
    /// [`replace_keys`](Self::replace_keys).
    pub fn insert(&self, key: K, quota: Quota) -> Result<(), LimiterError> {
        self.insert_at(key, quota, self.clock.now_nanos())
    }

    /// [`insert`](Self::insert) at clock reading `now`.
    pub fn insert_at(&self, key: K, quota: Quota, now: u64) -> Result<(), LimiterError> {
        let mut writer = self.writer.lock();
        let writer = &mut *writer;
        let current = self.table.load_full();
        let hash = self.hasher.hash_one(&key);
        let quota_id = writer.intern(&self.quotas, quota)?;
        if let Some(id) = self.find(&current, hash, &key) {
            let old = self.update_slot(writer, id, quota, quota_id, now);
            writer.release(old);
            return Ok(());
        }
        let fresh_from = writer.next_slot;
        let id = match writer.alloc_slot(&self.slots) {
            Ok(id) => id,
            Err(err) => {
                writer.release(quota_id);
                return Err(err);
            }
        };
        if let Some(slot) = self.slots.get(id) {
            // SAFETY: a slot just allocated is named by no published table; it held a key exactly
            // if it was handed out before this update.
            unsafe { slot.set_key(key, writer.had_key(id, fresh_from)) };
            let high = self.high_alloc(id, Interned::new(quota).wide);
            slot.lock().write(State::full(&quota, now), quota_id, high);
        }
        let mut next = Table::clone(&current);
        drop(current);
        if let Err(err) = next.insert(hash, id) {
            writer.release(quota_id);
            writer.free_slots.push(id);
            return Err(err);
        }
        self.publish(next);
        Ok(())
    }

    /// Removes `key` from the table: it falls to the best-effort bucket, and its slot is reused
    /// (reset to full) once no check can reach it.
    ///
    /// # Errors
    /// [`LimiterError::UnknownKey`] if `key` is not in the table.
    ///
    /// # Performance
    /// Copies the table of indexes, `O(keys)`.
    pub fn remove<Q>(&self, key: &Q) -> Result<(), LimiterError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut writer = self.writer.lock();
        let current = self.table.load_full();
        let hash = self.hasher.hash_one(key);
        let id = self
            .find(&current, hash, key)
            .ok_or(LimiterError::UnknownKey)?;
        let mut next = Table::clone(&current);
        drop(current);
        next.remove(hash, id);
        self.publish(next);
        self.free_slots(&mut writer, vec![id]);
        Ok(())
    }

    /// Puts `quota` (interned as `quota_id`) in force on slot `id` as of `now`; returns the id of
    /// the quota it had, for the caller to release.
    fn update_slot(&self, writer: &Writer, id: u32, quota: Quota, quota_id: u32, now: u64) -> u32 {
        let Some(slot) = self.slots.get(id) else {
            return quota_id;
        };
        let mut guard = slot.lock();
        let old = guard.quota_id();
        if old != quota_id {
            let old_quota = writer.quota(old);
            let mut state = guard.read(self.high(id, Interned::new(old_quota).wide));
            state.set_quota(&old_quota, &quota, now);
            let high = self.high_alloc(id, Interned::new(quota).wide);
            guard.write(state, quota_id, high);
        }
        old
    }

    /// Releases the quotas of slots no table names any more and queues them for reuse. Called
    /// after [`publish`](Self::publish), so no check can still reach them.
    fn free_slots(&self, writer: &mut Writer, removed: Vec<u32>) {
        for id in removed {
            if let Some(slot) = self.slots.get(id) {
                let quota_id = slot.lock().quota_id();
                writer.release(quota_id);
                writer.free_slots.push(id);
            }
        }
    }

    /// [`high`](Self::high), allocating the cell. Writer only.
    fn high_alloc(&self, id: u32, wide: bool) -> Option<&Wide> {
        if wide {
            self.wide.get_or_alloc(id)
        } else {
            None
        }
    }

    /// Publishes `next` as the table and returns once no check reads the previous one.
    fn publish(&self, next: Table) {
        let next = Arc::new(next);
        self.hint.publish(&next);
        let mut old = self.table.swap(next);
        // `swap` has turned every check's borrowed snapshot of the old table into a counted
        // reference, so the old table is ours alone once the count drops to one: the checks that
        // still hold it finish within a lookup and a bucket update. Waiting here, not dropping a
        // reference, keeps the freeing of a large table off the checks' path, and tells the
        // caller when the slots only the old table named can be reused.
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
