//! A shard upload's body as it is sent sealed: its bytes, then the tag of its seal
//! ([`oed_model::seal`], `docs/peer-api.md`, "Sealed shard uploads").

use oed_model::drive::ShardUpload;
use oed_model::seal::Seal;

/// `body` followed by the tag of `seal` over it ([`oed_model::seal`]), or `body` as it is
/// without a seal. A body that fails, or ends before the `file_len` bytes of its shard
/// file, ends there without a tag: the drive refuses it for what it lacks, as it would
/// the same body unsealed.
pub(super) fn sealed(body: ShardUpload, seal: Option<Seal>, file_len: u64) -> ShardUpload {
    match seal {
        Some(seal) => Box::pin(Sealed {
            body,
            seal: Some(seal),
            left: file_len,
        }),
        None => body,
    }
}

struct Sealed {
    body: ShardUpload,
    /// `None` once the tag is sent, or the body failed.
    seal: Option<Seal>,
    /// Bytes of the shard file still to come.
    left: u64,
}

impl futures_util::Stream for Sealed {
    type Item = std::io::Result<bytes::Bytes>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(seal) = this.seal.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let next = std::task::ready!(this.body.as_mut().poll_next(cx));
        std::task::Poll::Ready(Some(match next {
            Some(Ok(piece)) => {
                seal.update(&piece);
                this.left = this.left.saturating_sub(piece.len() as u64);
                Ok(piece)
            }
            Some(Err(e)) => {
                this.seal = None;
                Err(e)
            }
            None if this.left > 0 => return std::task::Poll::Ready(None),
            None => {
                let tag = this.seal.take().map(Seal::tag).unwrap_or_default();
                Ok(bytes::Bytes::copy_from_slice(&tag))
            }
        }))
    }
}
