//! The drive side of a near-data operation: [`Drive::run_op`](oed_model::drive::Drive::run_op)
//! on this drive's store. Operations run on threads of their own ([`OpLimits`]: as many
//! as `max_concurrent_ops`, at a lower CPU priority than the rest of the daemon; more
//! operations wait for a turn), never on the runtime or the blocking pool that serve S3,
//! so S3 requests on the same drive keep their threads and win the CPU when both want it.
//! A fold checks every chunk's CRC32C as a read does, stops at the first bad one (queued
//! for heal), stops when the caller goes away, and stops past its CPU-time limit.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::Store;
use oed_model::drive::{OpAnswer, OpRequest, StripePartial};
use oed_model::error::{Error, Result};

pub use super::op_threads::{OP_NICENESS, OpLimits};

/// Sets its flag when dropped: the request that owns it is gone.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec.unsigned_abs(), t.tv_nsec.unsigned_abs() as u32)
}

impl Store {
    /// [`Drive::run_op`](oed_model::drive::Drive::run_op) on this store.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::BadRequest`] (a parity shard, stripes out of range, a
    /// run the operation refuses, the CPU-time limit), [`Error::ShuttingDown`].
    pub(crate) async fn run_op(&self, req: &OpRequest) -> Result<OpAnswer> {
        let (record, bytes) = self.shard(&req.bucket, &req.key, Some(req.version))?;
        let layout = record.layout()?;
        let shard = usize::from(record.shard_index);
        if shard >= layout.k() {
            return Err(Error::BadRequest(format!(
                "shard {shard} of {:?} is parity: operations run on data shards",
                req.key
            )));
        }
        let count = layout.stripe_count(record.size);
        let asked = req.stripes.clone().unwrap_or(0..count);
        if asked.start > asked.end || asked.end > count {
            return Err(Error::BadRequest(format!(
                "stripes {}..{} of a shard of {count}",
                asked.start, asked.end
            )));
        }
        let cancelled = Arc::new(AtomicBool::new(false));
        let _guard = CancelOnDrop(cancelled.clone());
        let job = Job {
            store: self.clone(),
            req: req.clone(),
            record,
            layout,
            shard,
            stripes: asked,
            cancelled,
        };
        let span = tracing::Span::current();
        self.op_limits()
            .run(move || {
                let _in = span.enter();
                // The drive's energy while this operation has its thread.
                let energy = job.store.energy().cloned();
                let before = energy
                    .as_ref()
                    .and_then(oed_meter::EnergyReader::joules_now);
                let mut answer = job.fold(bytes)?;
                if let (Some(meter), Some(before)) = (&energy, before) {
                    answer.energy_joules = meter.joules_now().map(|now| (now - before).max(0.0));
                    answer.energy_method = meter.method().map(|m| m.as_str().to_owned());
                }
                Ok(answer)
            })
            .await?
    }
}

/// One drive's part of an operation, as its blocking thread runs it.
struct Job {
    store: Store,
    req: OpRequest,
    record: oed_model::record::ObjectRecord,
    layout: oed_ec::Layout,
    shard: usize,
    stripes: std::ops::Range<u64>,
    cancelled: Arc<AtomicBool>,
}

impl Job {
    /// The end of the stripes from the first asked whose chunk on this shard is a whole
    /// chunk of data (not the last stripe's shorter or padded one), up to `end`.
    fn whole_stripes_until(&self, end: u64) -> u64 {
        let mut s = self.stripes.start;
        while s < end {
            let whole = self.layout.stripe(self.record.size, s).is_some_and(|st| {
                st.chunk_len == self.record.chunk_size as usize
                    && st.chunk_range(self.shard).len() == st.chunk_len
            });
            if !whole {
                break;
            }
            s += 1;
        }
        s
    }

    /// Folds the chunks, one at a time. Blocks.
    fn fold(self, bytes: crate::ShardBytes) -> Result<OpAnswer> {
        let started = thread_cpu();
        let limit = self.store.op_limits().cpu;
        let mut answer = OpAnswer {
            shard: self.shard as u16,
            partials: Vec::new(),
            stripes_done: 0,
            bytes_read: 0,
            cpu_seconds: 0.0,
            energy_joules: None,
            energy_method: None,
            wire_bytes: 0,
        };
        let mut failure = None;
        // A CRC32C from the stored CRCs: every chunk that is all data answers with what
        // was stored for it; the rest (the last stripe's padded chunk) is read.
        let mut rest = self.stripes.clone();
        if self.req.plan.from_stored_crcs() {
            let whole = rest.start..self.whole_stripes_until(rest.end);
            let crcs = self.store.chunk_crcs(&self.record, &bytes, whole.clone())?;
            let len = u64::from(self.record.chunk_size);
            for (s, crc) in whole.clone().zip(crcs) {
                answer.partials.push(StripePartial {
                    stripe: s,
                    partial: oed_ops::op::Plan::crc32c_partial(crc, len),
                });
            }
            answer.stripes_done = whole.end - whole.start;
            answer.bytes_read = 4 * answer.stripes_done;
            rest.start = whole.end;
        }
        let folded = self
            .store
            .fold_chunks(&self.record, bytes, rest, &mut |s, chunk| {
                if self.cancelled.load(Ordering::Relaxed) {
                    failure = Some(Error::BodyBroken("the caller went away".into()));
                    self.store
                        .op_limits()
                        .cancelled
                        .fetch_add(1, Ordering::Relaxed);
                    return ControlFlow::Break(());
                }
                if thread_cpu().saturating_sub(started) > limit {
                    failure = Some(Error::BadRequest(format!(
                        "the operation needed more than op_cpu_seconds = {} s of CPU on drive {}",
                        limit.as_secs(),
                        self.store.drive_id()
                    )));
                    return ControlFlow::Break(());
                }
                answer.bytes_read += chunk.len() as u64;
                match self.chunk(s, &chunk, &mut answer.partials) {
                    Ok(()) => {
                        answer.stripes_done += 1;
                        ControlFlow::Continue(())
                    }
                    Err(e) => {
                        failure = Some(e);
                        ControlFlow::Break(())
                    }
                }
            });
        if let Some(e) = failure {
            return Err(e);
        }
        match folded {
            // A bad chunk ends the fold; the coordinator rebuilds from there.
            Ok(()) | Err(Error::CorruptShard { .. }) => {}
            Err(e) => return Err(e),
        }
        answer.cpu_seconds = thread_cpu().saturating_sub(started).as_secs_f64();
        Ok(answer)
    }

    /// Folds the chunk of stripe `s` into `partials`: one more for an operation whose
    /// merge follows object order, into the one there for one that commutes.
    fn chunk(&self, s: u64, chunk: &[u8], partials: &mut Vec<StripePartial>) -> Result<()> {
        let plan = &self.req.plan;
        let bad = |e: oed_ops::Error| Error::BadRequest(e.to_string());
        // The chunk's object bytes: the last stripe's chunks end in padding.
        let stripe = self
            .layout
            .stripe(self.record.size, s)
            .ok_or_else(|| Error::BadRequest(format!("stripe {s} is past the shard's end")))?;
        let r = stripe.chunk_range(self.shard);
        if r.is_empty() {
            return Ok(());
        }
        let offset = self.req.base + stripe.object_offset + r.start as u64;
        // Only what the operation covers, at the offset it sees.
        let Some((offset, bytes)) = plan.clip(offset, &chunk[..r.len()]) else {
            return Ok(());
        };
        let partial = plan.run(offset, bytes).map_err(bad)?;
        // One partial for an operation that commutes: the one there, taken out (not
        // copied: a grep's grows with the chunks folded) and merged with this chunk's.
        match partials.pop() {
            Some(last) if plan.commutes() => partials.push(StripePartial {
                stripe: last.stripe,
                partial: plan.merge(last.partial, partial).map_err(bad)?,
            }),
            last => {
                partials.extend(last);
                partials.push(StripePartial { stripe: s, partial });
            }
        }
        Ok(())
    }
}
