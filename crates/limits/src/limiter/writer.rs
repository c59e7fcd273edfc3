//! What only updates touch: the interned quota ids and their reference counts, behind the
//! limiter's writer lock.

use hashbrown::HashMap;

use super::LimiterError;
use super::arena::{Arena, Interned, QuotaCell};
use super::quota::Quota;

/// What only updates touch: quota-id allocation.
#[derive(Default)]
pub(super) struct Writer {
    /// Id of each interned quota.
    quota_ids: HashMap<Quota, u32>,
    /// Per quota id: the quota and how many buckets refer to it (0: free).
    quota_refs: Vec<(Quota, u32)>,
    /// Quota ids no bucket refers to, to reuse.
    free_quotas: Vec<u32>,
}

impl Writer {
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
        // SAFETY: the id was free, so no bucket refers to it yet; buckets that will are written
        // after this, under their lock (see the `arena` module rules).
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
