//! What only updates touch: the allocation of slots and of interned quota ids, behind the
//! limiter's writer lock.

use hashbrown::HashMap;

use super::LimiterError;
use super::quota::Quota;
use super::slots::{Arena, Interned, QuotaCell, Slot};

/// What only updates touch: slot and quota-id allocation.
#[derive(Default)]
pub(super) struct Writer {
    /// Slots `[0, next_slot)` have been handed out and hold a key (live, or stale if freed).
    pub(super) next_slot: u32,
    /// Slots no published table names any more, to reuse.
    pub(super) free_slots: Vec<u32>,
    /// Id of each interned quota.
    quota_ids: HashMap<Quota, u32>,
    /// Per quota id: the quota and how many slots refer to it (0: free).
    quota_refs: Vec<(Quota, u32)>,
    /// Quota ids no slot refers to, to reuse.
    free_quotas: Vec<u32>,
}

impl Writer {
    /// A slot no published table names: a freed one (holding a stale key) or a new one.
    pub(super) fn alloc_slot<K>(&mut self, slots: &Arena<Slot<K>>) -> Result<u32, LimiterError> {
        if let Some(id) = self.free_slots.pop() {
            return Ok(id);
        }
        let id = self.next_slot;
        // u32::MAX stays unused so that `next_slot` counts every slot without overflowing.
        if id == u32::MAX {
            return Err(LimiterError::TooManyKeys);
        }
        slots.get_or_alloc(id).ok_or(LimiterError::TooManyKeys)?;
        self.next_slot = id + 1;
        Ok(id)
    }

    /// Whether slot `id` held a key before [`alloc_slot`](Self::alloc_slot) returned it.
    pub(super) fn had_key(&self, id: u32, fresh_from: u32) -> bool {
        id < fresh_from
    }

    /// The id of `quota`, interned with one more reference.
    pub(super) fn intern(
        &mut self,
        quotas: &Arena<QuotaCell>,
        quota: Quota,
    ) -> Result<u32, LimiterError> {
        if let Some(&id) = self.quota_ids.get(&quota) {
            self.quota_refs[id as usize].1 += 1;
            return Ok(id);
        }
        let id = match self.free_quotas.pop() {
            Some(id) => {
                self.quota_refs[id as usize] = (quota, 1);
                id
            }
            None => {
                let id =
                    u32::try_from(self.quota_refs.len()).map_err(|_| LimiterError::TooManyKeys)?;
                self.quota_refs.push((quota, 1));
                id
            }
        };
        let Some(cell) = quotas.get_or_alloc(id) else {
            self.release(id);
            return Err(LimiterError::TooManyKeys);
        };
        // SAFETY: the id was free, so no slot refers to it yet; slots that will are written after
        // this, under their lock (see `slots` module rules).
        unsafe { cell.set(Interned::new(quota)) };
        self.quota_ids.insert(quota, id);
        Ok(id)
    }

    /// Drops one reference to quota `id`, freeing it at zero.
    pub(super) fn release(&mut self, id: u32) {
        let (quota, refs) = &mut self.quota_refs[id as usize];
        *refs -= 1;
        if *refs == 0 {
            self.quota_ids.remove(quota);
            self.free_quotas.push(id);
        }
    }

    /// The quota with id `id`.
    pub(super) fn quota(&self, id: u32) -> Quota {
        self.quota_refs[id as usize].0
    }
}
