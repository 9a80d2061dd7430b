//! The `sort` operation: an object's fixed-width records sorted into a new object. Each
//! data drive sorts the records of each chunk it holds (the n log n work, where the data
//! lies); the coordinator gathers the sorted runs, joins and sorts the few bytes of
//! records cut by chunk edges, merges all runs k ways and writes the result by parts of
//! 8 MiB. The runs are held on the coordinator while they merge, so objects are limited
//! to [`MAX_SORT`] bytes; a larger sort needs an external merge through the drives,
//! which is not built. It saves no bytes: every record crosses to the coordinator.

use std::sync::Arc;

use oed_ops::op::{Op, Partial};

use super::coordinator::{Cost, Outcome, Window, extent_stripes, plan_for, windows};
use super::parts::NewParts;
use crate::Cluster;
use oed_model::error::{Error, Result};
use oed_model::record::ObjectRecord;

/// Largest object `sort` takes, bytes.
pub const MAX_SORT: u64 = 256 << 20;
/// Stripes gathered at a time.
const WINDOW: u64 = 8;
/// Bytes of the result per part written.
const PART: usize = 8 << 20;

impl Cluster {
    /// Runs a `sort` operation over `record`'s object; see the module docs.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an object larger than [`MAX_SORT`] or a format that does
    /// not fit; as [`Cluster::run_op`] and [`Cluster::put_object`] otherwise. Parts
    /// written before a failure are deleted.
    pub async fn sort(self: &Arc<Self>, record: &ObjectRecord, op: Op) -> Result<Outcome> {
        let window = Window::open(self);
        let Op::Sort(sort) = &op else {
            return Err(Error::BadRequest("not a sort operation".into()));
        };
        let n = record.object_size();
        if n > MAX_SORT {
            return Err(Error::BadRequest(format!(
                "sort takes objects of up to {MAX_SORT} bytes (the runs merge in the \
                 coordinator's memory); this one has {n}"
            )));
        }
        let mut cost = Cost {
            object_bytes: n,
            passes: 1,
            ..Cost::default()
        };
        let runs = self.sorted_runs(record, &op, &mut cost).await?;
        let mut merge = oed_ops::sort::Merge::new(sort.format, runs);
        let mut out = NewParts::new(self, &record.bucket);
        let written = async {
            loop {
                let batch = merge.next_batch(PART);
                if batch.is_empty() {
                    break;
                }
                out.push(vec![bytes::Bytes::from(batch)]).await?;
            }
            if out.bytes() != n {
                return Err(Error::Unavailable(format!(
                    "the sorted runs hold {} of {n} bytes",
                    out.bytes()
                )));
            }
            Ok(())
        }
        .await;
        cost.network_bytes += out.network_bytes();
        let done = out
            .finish(written, &sort.target, "application/octet-stream")
            .await?;
        window.close(&mut cost);
        let result = serde_json::json!({
            "target": sort.target,
            "etag": done.etag,
            "parts": done.parts,
            "records": n / sort.format.width() as u64,
            "format": sort.format,
        });
        Ok(Outcome { result, cost })
    }
    /// The sorted runs of `record`'s object for `op` (a sort): the drives' runs, and the
    /// records cut by chunk edges joined and sorted here.
    async fn sorted_runs(
        self: &Arc<Self>,
        record: &ObjectRecord,
        op: &Op,
        cost: &mut Cost,
    ) -> Result<Vec<Vec<u8>>> {
        let Op::Sort(sort) = op else {
            return Err(Error::BadRequest("not a sort operation".into()));
        };
        let (plan, exts) = plan_for(record, op.clone(), None)?;
        let mut runs: Vec<Vec<u8>> = Vec::new();
        let mut cut: Vec<(u64, Vec<u8>)> = Vec::new();
        for (ext, base, stripes) in extent_stripes(&plan, &exts) {
            for window in windows(stripes, WINDOW) {
                for (_, _, p) in self
                    .gather(&record.bucket, ext, base, &plan, window, cost)
                    .await?
                {
                    let Partial::Run(r) = p else {
                        return Err(Error::BadRequest("not a sorted run".into()));
                    };
                    if r.sorted {
                        runs.push(r.bytes);
                    } else {
                        cut.push((r.offset, r.bytes));
                    }
                }
            }
        }
        // Cut runs meet one another: joined in object order, they are whole records.
        cut.sort_by_key(|(o, _)| *o);
        let mut joined: Vec<(u64, Vec<u8>)> = Vec::new();
        for (o, b) in cut {
            match joined.last_mut() {
                Some((lo, lb)) if *lo + lb.len() as u64 == o => lb.extend_from_slice(&b),
                _ => joined.push((o, b)),
            }
        }
        for (_, b) in joined {
            let run = sort.run(0, &b);
            if !run.sorted {
                return Err(Error::Unavailable(
                    "records cut by chunk edges do not join into whole ones".into(),
                ));
            }
            runs.push(run.bytes);
        }
        Ok(runs)
    }
}
