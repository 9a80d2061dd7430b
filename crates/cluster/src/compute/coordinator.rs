//! The coordinator side of a near-data operation. It plans the operation for the whole
//! object (`oed_ops::op::Plan`), asks the drive of every data shard of every extent for
//! its part ([`Drive::run_op`](oed_model::drive::Drive::run_op)), all at once, and merges
//! the partials in object order: by extent, stripe and shard, so that an answer never
//! depends on which drive replied first. What a drive could not fold (it is down, timed
//! out, or found a chunk failing its CRC32C) is read here through the stripe source,
//! which rebuilds those chunks from parity (Reed-Solomon is linear over GF(2^8), not
//! over the numbers, so partials of parity are of no use), and folded here: the answer
//! stays exact, and its cost says parity was used and what it cost. SHA-256, which does
//! not split, is streamed here in object order.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use oed_ops::op::{Op, Partial, Plan};
use serde::Serialize;

use crate::Cluster;
use crate::budget::Budget;
use crate::read::extents;
use crate::stripes::{Chunk, StripeSource};
use oed_model::drive::{DriveError, OpAnswer, OpRequest};
use oed_model::error::{Error, Result};
use oed_model::record::{ObjectRecord, PartRef};

/// What an operation cost, reported with every answer, so that a user can see whether
/// computing near the data paid.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Cost {
    /// Wall time of the operation on the coordinator, seconds.
    pub wall_seconds: f64,
    /// Object bytes the operation covered.
    pub object_bytes: u64,
    /// Bytes that crossed the network between drives: the answers of the other drives,
    /// and the chunks read here to rebuild or stream (this drive's own included).
    pub network_bytes: u64,
    /// Bytes of the answer's body sent to the client (this answer counts itself), when
    /// it went through the S3 port.
    pub client_bytes: u64,
    /// CPU time the drives spent folding, seconds (their own reports).
    pub drive_cpu_seconds: f64,
    /// Bytes the drives read from their disks for their parts.
    pub drive_bytes_read: u64,
    /// Bytes the coordinator read through the stripe source (rebuilt stripes, SHA-256).
    pub coordinator_bytes: u64,
    /// Whether any chunk was rebuilt from parity.
    pub parity_used: bool,
    /// Stripes the coordinator folded itself because a drive could not.
    pub rebuilt_stripes: u64,
    /// Whether an object was read here in order because the drives' parts could not
    /// give its answer (CSV with a quoted field across a chunk edge).
    pub in_order: bool,
    /// Passes over the data: 2 for a histogram between the data's extremes (`bins`),
    /// whose first pass finds them.
    pub passes: u32,
    /// Energy the drives involved used over the operation, joules: each data drive over
    /// its part, the coordinator over the whole (each drive counted once), from their
    /// meters. `None` when no drive meters power.
    pub energy_joules: Option<f64>,
    /// How that energy was had: "measured", "modelled", or "mixed" (some of each). A model
    /// is never passed off as a measurement.
    pub energy_method: Option<String>,
    /// The coordinator's share of `energy_joules`.
    pub coordinator_energy_joules: Option<f64>,
    /// Each drive asked, in extent and shard order.
    pub drives: Vec<DriveCost>,
}

impl Cost {
    /// Adds the cost of one object's operation (not its energy, which the coordinator
    /// measures over the whole): bytes, CPU, and each drive's figures added to that
    /// drive's.
    fn absorb(&mut self, one: Cost) {
        self.object_bytes += one.object_bytes;
        self.network_bytes += one.network_bytes;
        self.drive_cpu_seconds += one.drive_cpu_seconds;
        self.drive_bytes_read += one.drive_bytes_read;
        self.coordinator_bytes += one.coordinator_bytes;
        self.parity_used |= one.parity_used;
        self.rebuilt_stripes += one.rebuilt_stripes;
        self.in_order |= one.in_order;
        self.passes = self.passes.max(one.passes);
        if let (Some(j), Some(m)) = (one.energy_joules, one.energy_method) {
            self.add_energy(Some(j), Some(&m));
        }
        for d in one.drives {
            match self.drives.iter_mut().find(|x| x.drive == d.drive) {
                Some(x) => {
                    x.bytes_read += d.bytes_read;
                    x.cpu_seconds += d.cpu_seconds;
                    x.answer_bytes += d.answer_bytes;
                    x.stripes_done += d.stripes_done;
                    x.energy_joules = match (x.energy_joules, d.energy_joules) {
                        (Some(a), Some(b)) => Some(a + b),
                        (a, b) => a.or(b),
                    };
                    x.failed = x.failed.take().or(d.failed);
                }
                None => self.drives.push(d),
            }
        }
    }

    /// Adds one drive's energy, keeping track of how the figures were had.
    fn add_energy(&mut self, joules: Option<f64>, method: Option<&str>) {
        let (Some(j), Some(m)) = (joules, method) else {
            return;
        };
        self.energy_joules = Some(self.energy_joules.unwrap_or(0.0) + j);
        self.energy_method = match self.energy_method.take() {
            None => Some(m.to_owned()),
            Some(prev) if prev == m => Some(prev),
            Some(_) => Some("mixed".to_owned()),
        };
    }
}

/// One drive's part of a [`Cost`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DriveCost {
    /// The drive.
    pub drive: String,
    /// The shard it was asked for.
    pub shard: u16,
    /// Bytes it read from its disk.
    pub bytes_read: u64,
    /// CPU time it spent, seconds.
    pub cpu_seconds: f64,
    /// Bytes its answer took on the network (0 for this drive's own).
    pub answer_bytes: u64,
    /// Stripes it folded, of those asked.
    pub stripes_done: u64,
    /// Energy it used over its part, joules (the whole drive, from its meter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_joules: Option<f64>,
    /// Why it did not answer, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// An operation's answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// The result (the operation says its shape).
    pub result: serde_json::Value,
    /// What it cost.
    pub cost: Cost,
}

impl Outcome {
    /// The answer as the client gets it, JSON, with `cost.client_bytes` its own length.
    ///
    /// # Errors
    /// When the result cannot be written as JSON (it always can).
    pub fn to_json(mut self) -> serde_json::Result<Vec<u8>> {
        // The length's own digits change the length; a few rounds settle it.
        let mut json = serde_json::to_vec(&self)?;
        for _ in 0..4 {
            if self.cost.client_bytes == json.len() as u64 {
                break;
            }
            self.cost.client_bytes = json.len() as u64;
            json = serde_json::to_vec(&self)?;
        }
        Ok(json)
    }
}

/// Bytes read for a CSV header, to find a column by name.
const HEADER_BYTES: u64 = 64 * 1024;

/// Whether a prefix's answer merges its objects' partials into a `total`: operations
/// whose partials commute, so that whole objects merge as one.
fn totals(op: &Op) -> bool {
    matches!(op, Op::Stats(_) | Op::Compressibility(_) | Op::Dedup(_))
}

/// A partial and where it belongs in object order.
struct PlacedPartial {
    extent: usize,
    stripe: u64,
    shard: u16,
    partial: Partial,
}

pub(super) fn bad(e: &oed_ops::Error) -> Error {
    Error::BadRequest(e.to_string())
}

/// The object bytes of a chunk the stripe source gave, in the pieces they came in (its
/// zero padding left out).
fn data_pieces(chunk: &Chunk) -> impl Iterator<Item = &[u8]> {
    let mut left = chunk.data_len;
    chunk.pieces.iter().map(move |p| {
        let take = p.len().min(left);
        left -= take;
        &p[..take]
    })
}

/// `plan` for `record`'s object, and its extents. BLAKE3's subtrees are the smallest
/// chunk size among the extents.
pub(super) fn plan_for(
    record: &ObjectRecord,
    op: Op,
    range: Option<Range<u64>>,
) -> Result<(Plan, Vec<PartRef>)> {
    let exts = extents(record);
    let subtree = exts
        .iter()
        .map(|e| u64::from(e.chunk_size))
        .min()
        .unwrap_or(u64::from(oed_ec::layout::DEFAULT_CHUNK_SIZE));
    let plan = match range {
        Some(r) => Plan::within(op, r, subtree),
        None => Plan::new(op, record.object_size(), subtree),
    }
    .map_err(|e| bad(&e))?;
    Ok((plan, exts))
}

/// Each extent of `exts` with its object offset and the stripes of it that `plan`
/// covers (possibly none), in object order.
pub(super) fn extent_stripes<'a>(
    plan: &'a Plan,
    exts: &'a [PartRef],
) -> impl Iterator<Item = (&'a PartRef, u64, Range<u64>)> + 'a {
    exts.iter().scan(0, move |base: &mut u64, ext| {
        let at = *base;
        *base = base.saturating_add(ext.size);
        let stripe_bytes = u64::from(ext.k) * u64::from(ext.chunk_size);
        Some((ext, at, plan.stripes(at, ext.size, stripe_bytes)))
    })
}

/// `stripes` in windows of at most `n` stripes.
pub(super) fn windows(stripes: Range<u64>, n: u64) -> impl Iterator<Item = Range<u64>> {
    let end = stripes.end;
    stripes
        .step_by(usize::try_from(n).unwrap_or(usize::MAX))
        .map(move |s| s..(s + n).min(end))
}

/// The coordinator's time and energy over one request: opened before the work, closed
/// into its cost.
pub(super) struct Window {
    started: Instant,
    meter: Option<oed_meter::EnergyReader>,
    joules_before: Option<f64>,
}

impl Window {
    pub(super) fn open(cluster: &Cluster) -> Self {
        let meter = cluster.local_store().energy().cloned();
        let joules_before = meter.as_ref().and_then(oed_meter::EnergyReader::joules_now);
        Self {
            started: Instant::now(),
            meter,
            joules_before,
        }
    }

    /// Sets the cost's wall time, and adds the coordinator's energy over the window.
    pub(super) fn close(self, cost: &mut Cost) {
        cost.wall_seconds = self.started.elapsed().as_secs_f64();
        if let (Some(m), Some(before)) = (&self.meter, self.joules_before) {
            cost.coordinator_energy_joules = m.joules_now().map(|now| (now - before).max(0.0));
            let method = m.method().map(|x| x.as_str().to_owned());
            cost.add_energy(cost.coordinator_energy_joules, method.as_deref());
        }
    }
}

impl Cluster {
    /// Runs `op` over the current version of `record`'s object; see the module docs.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when the operation does not fit the object (a record width
    /// that does not divide it, bad parameters); [`Error::Unavailable`] when fewer than
    /// `k` chunks of some stripe can be had; [`Error::SlowDown`] when the coordinator's
    /// memory for data in flight stays taken.
    pub async fn run_op(self: &Arc<Self>, record: &ObjectRecord, op: Op) -> Result<Outcome> {
        self.run_op_range(record, op, None).await
    }

    /// [`Cluster::run_op`] over object bytes `range` only (clipped to the object): the
    /// operation sees them as the whole, as if they were an object of their own.
    ///
    /// # Errors
    /// As [`Cluster::run_op`].
    pub async fn run_op_range(
        self: &Arc<Self>,
        record: &ObjectRecord,
        op: Op,
        range: Option<Range<u64>>,
    ) -> Result<Outcome> {
        let size = record.object_size();
        let range = range.map(|r| r.start.min(size)..r.end.min(size));
        if let Op::Compress(_) = op {
            return self.compress(record, op, range).await;
        }
        if matches!(op, Op::Add(_) | Op::Sort(_) | Op::Decompress(_)) {
            if range.is_some() {
                return Err(Error::BadRequest(
                    "add, sort and decompress run on whole objects, not a range".into(),
                ));
            }
            return match op {
                Op::Add(_) => self.add(record, op).await,
                Op::Sort(_) => self.sort(record, op).await,
                _ => self.decompress(record, op).await,
            };
        }
        let window = Window::open(self);
        let (result, mut cost) = match &op {
            // A histogram between the data's extremes: a first pass finds them.
            Op::Stats(s) if s.bins.is_some() => {
                s.validate().map_err(|e| bad(&e))?;
                let first = oed_ops::stats::Stats {
                    bins: None,
                    quantiles: None,
                    accuracy: None,
                    ..s.clone()
                };
                let (extremes, first_cost) =
                    self.pass(record, Op::Stats(first), range.clone()).await?;
                let edges = s.with_bins_over(extremes["min"].as_f64(), extremes["max"].as_f64());
                let (result, mut cost) = self.pass(record, Op::Stats(edges), range).await?;
                let covered = cost.object_bytes;
                cost.absorb(first_cost);
                (cost.object_bytes, cost.passes) = (covered, 2);
                (result, cost)
            }
            _ => self.pass(record, op, range).await?,
        };
        window.close(&mut cost);
        Ok(Outcome { result, cost })
    }

    /// One pass of `op` over `record`'s object (or `range` of it): its answer and cost,
    /// without the coordinator's time and energy.
    async fn pass(
        self: &Arc<Self>,
        record: &ObjectRecord,
        op: Op,
        range: Option<Range<u64>>,
    ) -> Result<(serde_json::Value, Cost)> {
        let (op, header_bytes) = self.name_to_index(record, op, range.as_ref()).await?;
        let (plan, exts) = plan_for(record, op, range)?;
        let mut cost = Cost {
            object_bytes: plan.object_len,
            passes: 1,
            coordinator_bytes: header_bytes,
            network_bytes: header_bytes,
            ..Cost::default()
        };
        let (result, _) = self.object_op(record, &plan, &exts, &mut cost).await?;
        Ok((result, cost))
    }

    /// `op` with a CSV column named by the header turned into its index, the header read
    /// here from the first bytes of the object (or of `range`); also the bytes read.
    async fn name_to_index(
        self: &Arc<Self>,
        record: &ObjectRecord,
        op: Op,
        range: Option<&Range<u64>>,
    ) -> Result<(Op, u64)> {
        use futures_util::StreamExt as _;
        use oed_ops::stats::Column;
        let Op::Stats(mut s) = op else {
            return Ok((op, 0));
        };
        let Some(Column::Name(name)) = &s.column else {
            return Ok((Op::Stats(s), 0));
        };
        s.validate().map_err(|e| bad(&e))?;
        let (start, end) = range.map_or((0, record.object_size()), |r| (r.start, r.end));
        let want = (end - start).min(HEADER_BYTES);
        let mut body = self.read_object(record, start..start + want).await?;
        let mut head = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
        while let Some(piece) = body.next().await {
            let piece =
                piece.map_err(|e| Error::Unavailable(format!("reading the header: {e}")))?;
            head.extend_from_slice(&piece);
        }
        let delimiter = s.delimiter.map_or(b',', |d| d as u8);
        let index = oed_ops::text::header_index(&head, want == end - start, name, delimiter)
            .map_err(|e| bad(&e))?;
        s.column = Some(Column::Index(index));
        Ok((Op::Stats(s), head.len() as u64))
    }

    /// Runs `plan` over one object: its answer, and for an operation that splits, the
    /// merged partial it was finished from.
    async fn object_op(
        self: &Arc<Self>,
        record: &ObjectRecord,
        plan: &Plan,
        exts: &[PartRef],
        cost: &mut Cost,
    ) -> Result<(serde_json::Value, Option<Partial>)> {
        if !plan.splits() {
            let result = self.sequential_op(&record.bucket, exts, plan, cost).await?;
            return Ok((result, None));
        }
        let partial = self.split_op(&record.bucket, exts, plan, cost).await?;
        match plan.finish(&partial) {
            Ok(result) => Ok((result, Some(partial))),
            // The drives' parts cannot give the answer (a CSV quoted field crosses a
            // chunk): the object is read here in order, and the cost says so.
            Err(oed_ops::Error::InOrder(why)) => {
                tracing::info!(key = %record.key, %why, "folding the object in order");
                cost.in_order = true;
                let result = self.sequential_op(&record.bucket, exts, plan, cost).await?;
                Ok((result, None))
            }
            // Something only the whole shows (a CSV column no record has).
            Err(oed_ops::Error::BadArgument(m)) => Err(Error::BadRequest(m)),
            Err(e) => Err(Error::Unavailable(format!(
                "the drives' parts do not add up: {e}"
            ))),
        }
    }

    /// Runs `op` over every object of `records` (one bucket's, in key order), one after
    /// another. The answer lists each object's result; operations whose partials commute
    /// (statistics, compressibility, dedup) are also merged over all of them (`total`),
    /// exactly as if the objects were one (dedup then finds content repeated across
    /// objects); grep totals its counts. The cost is the sum, with each drive's figures
    /// added up.
    ///
    /// # Errors
    /// As [`Cluster::run_op`], for the first object that fails.
    pub async fn run_op_many(
        self: &Arc<Self>,
        records: &[ObjectRecord],
        op: Op,
    ) -> Result<Outcome> {
        if matches!(
            op,
            Op::Compress(_) | Op::Add(_) | Op::Sort(_) | Op::Decompress(_)
        ) {
            return Err(Error::BadRequest(
                "compress, decompress, add and sort run on one object, not on many".into(),
            ));
        }
        if matches!(&op, Op::Stats(s) if s.bins.is_some()) {
            return Err(Error::BadRequest(
                "bins between the extremes take one object; over a prefix give edges".into(),
            ));
        }
        let window = Window::open(self);
        let mut cost = Cost::default();
        let mut objects = Vec::with_capacity(records.len());
        // The merged partial of the objects so far, and their length and smallest subtree.
        let mut total: Option<(Partial, u64, u64)> = None;
        let (mut lines, mut matches) = (0u64, 0u64);
        for record in records {
            let (one_op, header_bytes) = self.name_to_index(record, op.clone(), None).await?;
            let (plan, exts) = plan_for(record, one_op, None).map_err(|e| match e {
                Error::BadRequest(m) => Error::BadRequest(format!("{}: {m}", record.key)),
                e => e,
            })?;
            let mut one = Cost {
                object_bytes: record.object_size(),
                coordinator_bytes: header_bytes,
                network_bytes: header_bytes,
                passes: 1,
                ..Cost::default()
            };
            let (result, partial) = self.object_op(record, &plan, &exts, &mut one).await?;
            cost.absorb(one);
            if let Op::Grep(_) = op {
                lines += result["lines"].as_u64().unwrap_or(0);
                matches += result["matches"].as_u64().unwrap_or(0);
            }
            if let (true, Some(p)) = (totals(&op), partial) {
                // Whole objects: their partials hold no cut records, and merge exactly.
                total = Some(match total {
                    None => (p, plan.object_len, plan.subtree),
                    Some((acc, len, subtree)) => (
                        plan.merge(acc, p).map_err(|e| bad(&e))?,
                        len + plan.object_len,
                        subtree.min(plan.subtree),
                    ),
                });
            }
            objects.push(serde_json::json!({"key": record.key, "result": result}));
        }
        let mut result = serde_json::json!({ "objects": objects });
        if totals(&op) {
            let (acc, len, subtree) = if let Some(t) = total {
                t
            } else {
                let plan = Plan::new(op.clone(), 0, 1024).map_err(|e| bad(&e))?;
                (plan.empty().map_err(|e| bad(&e))?, 0, 1024)
            };
            let plan = Plan::new(op.clone(), len, subtree).map_err(|e| bad(&e))?;
            result["total"] = plan.finish(&acc).map_err(|e| bad(&e))?;
        } else if let Op::Grep(_) = op {
            result["total"] = serde_json::json!({"lines": lines, "matches": matches});
        }
        window.close(&mut cost);
        Ok(Outcome { result, cost })
    }

    async fn split_op(
        self: &Arc<Self>,
        bucket: &str,
        exts: &[PartRef],
        plan: &Plan,
        cost: &mut Cost,
    ) -> Result<Partial> {
        let mut placed: Vec<PlacedPartial> = Vec::new();
        for (x, (ext, base, stripes)) in extent_stripes(plan, exts).enumerate() {
            if !stripes.is_empty() {
                let part = self.gather(bucket, ext, base, plan, stripes, cost).await?;
                placed.extend(
                    part.into_iter()
                        .map(|(stripe, shard, partial)| PlacedPartial {
                            extent: x,
                            stripe,
                            shard,
                            partial,
                        }),
                );
            }
        }
        placed.sort_by_key(|p| (p.extent, p.stripe, p.shard));
        let mut acc = plan.empty().map_err(|e| bad(&e))?;
        for p in placed {
            acc = plan.merge(acc, p.partial).map_err(|e| bad(&e))?;
        }
        Ok(acc)
    }

    /// The partials of stripes `stripes` of extent `ext` (at object offset `base`), as
    /// `(stripe, shard, partial)`: each data drive asked for its part, all at once, and
    /// what a drive could not fold folded here.
    pub(super) async fn gather(
        self: &Arc<Self>,
        bucket: &str,
        ext: &PartRef,
        base: u64,
        plan: &Plan,
        stripes: std::ops::Range<u64>,
        cost: &mut Cost,
    ) -> Result<Vec<(u64, u16, Partial)>> {
        let mut placed = Vec::new();
        let req = OpRequest {
            bucket: bucket.to_owned(),
            key: ext.key.clone(),
            version: ext.version_id,
            base,
            plan: plan.clone(),
            stripes: Some(stripes.clone()),
        };
        let answers = join_all((0..ext.k).map(|i| self.ask(ext, i, &req))).await;
        for (i, answer) in (0..ext.k).zip(answers) {
            let done = match answer {
                Ok((a, answer_bytes)) => {
                    cost.drive_bytes_read += a.bytes_read;
                    cost.drive_cpu_seconds += a.cpu_seconds;
                    cost.network_bytes += answer_bytes;
                    let drive = ext.drives[usize::from(i)].clone();
                    // The coordinator's own energy is counted over the whole.
                    if drive != self.map().drives[self.map().local].id {
                        cost.add_energy(a.energy_joules, a.energy_method.as_deref());
                    }
                    cost.drives.push(DriveCost {
                        drive,
                        shard: i,
                        bytes_read: a.bytes_read,
                        cpu_seconds: a.cpu_seconds,
                        answer_bytes,
                        stripes_done: a.stripes_done,
                        energy_joules: a.energy_joules,
                        failed: None,
                    });
                    placed.extend(a.partials.into_iter().map(|p| (p.stripe, i, p.partial)));
                    a.stripes_done
                }
                // The operation itself is wrong: every drive would say so.
                Err(e) if e.code == oed_model::drive::ErrorCode::BadRequest => {
                    return Err(Error::BadRequest(e.message));
                }
                Err(e) => {
                    tracing::warn!(key = %ext.key, shard = i, drive = %ext.drives[usize::from(i)], error = %e, "a drive did not run its part; computing it from the other shards");
                    cost.drives.push(DriveCost {
                        drive: ext.drives[usize::from(i)].clone(),
                        shard: i,
                        failed: Some(e.to_string()),
                        ..DriveCost::default()
                    });
                    0
                }
            };
            let from = stripes.start + done;
            if from < stripes.end {
                let rebuilt = self
                    .fold_here(
                        bucket,
                        ext,
                        usize::from(i),
                        from..stripes.end,
                        base,
                        plan,
                        cost,
                    )
                    .await?;
                placed.extend(
                    rebuilt
                        .into_iter()
                        .map(|(stripe, partial)| (stripe, i, partial)),
                );
            }
        }
        Ok(placed)
    }

    /// Asks the drive of data shard `i` of `ext` for its part; also the size its answer
    /// took on the network.
    async fn ask(
        &self,
        ext: &PartRef,
        i: u16,
        req: &OpRequest,
    ) -> Result<(OpAnswer, u64), DriveError> {
        let id = &ext.drives[usize::from(i)];
        let drive = self
            .drive(id)
            .ok_or_else(|| DriveError::unreachable("drive is not in the cluster map"))?;
        let answer = oed_model::drive::within(self.op_timeout, drive.run_op(req)).await?;
        if answer.shard != i {
            return Err(DriveError::unreachable(format!(
                "the drive holds shard {}, not {i}",
                answer.shard
            )));
        }
        // As received: no second serialization to measure it.
        let size = answer.wire_bytes;
        Ok((answer, size))
    }

    /// Folds data shard `shard` of `ext`, stripes `stripes`, here: read through the
    /// stripe source, rebuilt from parity where the chunk cannot be read.
    #[allow(clippy::too_many_arguments)]
    async fn fold_here(
        self: &Arc<Self>,
        bucket: &str,
        ext: &PartRef,
        shard: usize,
        stripes: std::ops::Range<u64>,
        base: u64,
        plan: &Plan,
        cost: &mut Cost,
    ) -> Result<Vec<(u64, Partial)>> {
        let stripe_bytes = u64::from(ext.k) * u64::from(ext.chunk_size);
        let _share = self
            .budget
            .take(Budget::read_share(ext.size, stripe_bytes))
            .await?;
        let mut source =
            StripeSource::open(self.clone(), bucket, ext.clone(), stripes, vec![shard]).await?;
        let mut out = Vec::new();
        while let Some(stripe) = source.next().await? {
            cost.rebuilt_stripes += 1;
            for chunk in &stripe.chunks {
                cost.parity_used |= chunk.rebuilt;
                if chunk.data_len == 0 {
                    continue;
                }
                // A partial folds one slice: a chunk that came in pieces (from another
                // drive) is joined; one rebuilt here, or read from this drive, is one.
                let pieces: Vec<&[u8]> = data_pieces(chunk).collect();
                let joined;
                let bytes = if let [one] = pieces.as_slice() {
                    *one
                } else {
                    joined = pieces.concat();
                    &joined
                };
                // Only what the operation covers, at the offset it sees.
                let Some((at, bytes)) = plan.clip(base + chunk.offset, bytes) else {
                    continue;
                };
                let partial = plan.run(at, bytes).map_err(|e| bad(&e))?;
                out.push((stripe.index, partial));
            }
        }
        cost.coordinator_bytes += source.bytes_read();
        cost.network_bytes += source.bytes_read();
        Ok(out)
    }

    /// An operation folded in order (SHA-256, or CSV the drives' parts could not answer):
    /// the object's data chunks streamed here.
    async fn sequential_op(
        self: &Arc<Self>,
        bucket: &str,
        exts: &[PartRef],
        plan: &Plan,
        cost: &mut Cost,
    ) -> Result<serde_json::Value> {
        let mut fold = plan
            .in_order()
            .ok_or_else(|| Error::BadRequest("the operation splits".into()))?;
        for (ext, base, stripes) in extent_stripes(plan, exts) {
            if stripes.is_empty() {
                continue;
            }
            let stripe_bytes = u64::from(ext.k) * u64::from(ext.chunk_size);
            let _share = self
                .budget
                .take(Budget::read_share(ext.size, stripe_bytes))
                .await?;
            let want = (0..usize::from(ext.k)).collect();
            let mut source =
                StripeSource::open(self.clone(), bucket, ext.clone(), stripes, want).await?;
            while let Some(stripe) = source.next().await? {
                for chunk in &stripe.chunks {
                    cost.parity_used |= chunk.rebuilt;
                    let mut at = base + chunk.offset;
                    for piece in data_pieces(chunk) {
                        if let Some((_, bytes)) = plan.clip(at, piece) {
                            fold.update(bytes).map_err(|e| bad(&e))?;
                        }
                        at += piece.len() as u64;
                    }
                }
            }
            cost.coordinator_bytes += source.bytes_read();
            cost.network_bytes += source.bytes_read();
        }
        fold.finish().map_err(|e| match e {
            oed_ops::Error::BadArgument(m) => Error::BadRequest(m),
            e => Error::Unavailable(format!("the object's bytes do not add up: {e}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer's `client_bytes` is its own length, across a change in its digits.
    #[test]
    fn the_answer_counts_its_own_bytes() {
        for pad in [0, 60, 950, 9_950] {
            let outcome = Outcome {
                result: serde_json::json!({"text": "x".repeat(pad)}),
                cost: Cost::default(),
            };
            let json = outcome.to_json().unwrap();
            let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
            assert_eq!(v["cost"]["client_bytes"], json.len(), "{pad}");
        }
    }
}
