//! The `add` operation: two objects of equal length added record by record into a third
//! (`oed_ops::vector`). The chunks of two objects lie on different drives, so nothing
//! near the data can add them without moving one of them: the coordinator reads both in
//! order (each through the usual read, from parity where needed), adds them as they come,
//! and writes the sum by parts of 8 MiB, holding one part at a time. It saves no bytes;
//! its cost report says so.

use std::sync::Arc;

use futures_util::StreamExt as _;
use oed_ops::op::Op;

use super::coordinator::{Cost, Outcome, Window, bad};
use super::parts::NewParts;
use crate::Cluster;
use crate::read::ObjectBody;
use oed_model::error::{Error, Result};
use oed_model::record::ObjectRecord;

/// Bytes of the sum per part written.
const PART: usize = 8 << 20;

/// Appends `body`'s next pieces to `buf` until it holds `want` bytes or the body ends.
async fn fill(body: &mut ObjectBody, buf: &mut Vec<u8>, want: usize) -> Result<()> {
    while buf.len() < want {
        match body.next().await {
            Some(piece) => buf.extend_from_slice(
                &piece.map_err(|e| Error::Unavailable(format!("reading an operand: {e}")))?,
            ),
            None => break,
        }
    }
    Ok(())
}

impl Cluster {
    /// Runs an `add` operation: `record`'s object plus the object `with` names, into
    /// `target`; see the module docs.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when the other object does not exist, or its length differs,
    /// or the format does not fit; as [`Cluster::read_object`] and
    /// [`Cluster::put_object`] otherwise. Parts written before a failure are deleted.
    pub async fn add(self: &Arc<Self>, record: &ObjectRecord, op: Op) -> Result<Outcome> {
        let window = Window::open(self);
        let Op::Add(add) = &op else {
            return Err(Error::BadRequest("not an add operation".into()));
        };
        let n = record.object_size();
        add.validate(n).map_err(|e| bad(&e))?;
        let other = self.head(&record.bucket, &add.with).await?.ok_or_else(|| {
            Error::BadRequest(format!("add: there is no object {:?} to add", add.with))
        })?;
        if other.object_size() != n {
            return Err(Error::BadRequest(format!(
                "add: {:?} has {n} bytes and {:?} {}: they must be equal",
                record.key,
                add.with,
                other.object_size()
            )));
        }
        let w = add.format.width();
        let mut a = self.read_object(record, 0..n).await?;
        let mut b = self.read_object(&other, 0..n).await?;
        let mut out = NewParts::new(self, &record.bucket);
        let written = async {
            let (mut xa, mut xb) = (Vec::with_capacity(PART), Vec::with_capacity(PART));
            let mut done = 0u64;
            while done < n {
                let want = usize::try_from((n - done).min(PART as u64)).unwrap_or(PART);
                fill(&mut a, &mut xa, want).await?;
                fill(&mut b, &mut xb, want).await?;
                let take = want.min(xa.len()).min(xb.len()) / w * w;
                if take == 0 {
                    return Err(Error::Unavailable(
                        "an operand ended before its length".into(),
                    ));
                }
                let mut sum = Vec::with_capacity(take);
                oed_ops::vector::add(add.format, &xa[..take], &xb[..take], &mut sum)
                    .map_err(|e| bad(&e))?;
                xa.drain(..take);
                xb.drain(..take);
                done += take as u64;
                out.push(vec![bytes::Bytes::from(sum)]).await?;
            }
            Ok(())
        }
        .await;
        // Both operands came here, and the sum went out with its parity.
        let network = 2 * n + out.network_bytes();
        let done = out
            .finish(written, &add.target, "application/octet-stream")
            .await?;
        let mut cost = Cost {
            object_bytes: 2 * n,
            coordinator_bytes: 2 * n,
            network_bytes: network,
            passes: 1,
            ..Cost::default()
        };
        window.close(&mut cost);
        let result = serde_json::json!({
            "target": add.target,
            "etag": done.etag,
            "parts": done.parts,
            "records": n / w as u64,
            "format": add.format,
        });
        Ok(Outcome { result, cost })
    }
}
