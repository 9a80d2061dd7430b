//! Whatever a record holds, as a disk or a peer gave it (times, sizes, part lists,
//! ranges asked for), the S3 answers built from it are made and written without a panic:
//! a property test over records decoded from JSON with arbitrary values.

use proptest::prelude::*;
use s3s::dto::{ListObjectsV2Output, Range, TimestampFormat};
use s3s::xml::Serialize as _;

use oed_model::record::{ObjectRecord, PartRef, VersionId};

fn part() -> impl Strategy<Value = PartRef> {
    (
        any::<u32>(),
        any::<u128>(),
        any::<u64>(),
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
    )
        .prop_map(|(number, version, size, k, m, chunk_size)| PartRef {
            number,
            key: format!("\u{1}p/upload/{number:05}"),
            version_id: VersionId(version),
            size,
            etag: "0123456789abcdef0123456789abcdef".into(),
            k,
            m,
            chunk_size,
            drives: Vec::new(),
            checksum: None,
        })
}

/// A record as JSON with arbitrary numbers, decoded as a drive decodes one.
fn record() -> impl Strategy<Value = ObjectRecord> {
    (
        any::<u128>(),
        any::<u64>(),
        any::<u64>(),
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        any::<u16>(),
        proptest::collection::vec(part(), 0..4),
        "[\\PC]{1,40}",
    )
        .prop_map(
            |(version, size, last_modified_ms, k, m, chunk_size, shard_index, parts, key)| {
                let rec = ObjectRecord {
                    bucket: "bkt".into(),
                    key,
                    version_id: VersionId(version),
                    size,
                    etag: "etag".into(),
                    last_modified_ms,
                    k,
                    m,
                    chunk_size,
                    shard_index,
                    parts,
                    ..ObjectRecord::default()
                };
                // Through JSON, as records come from disks and peers.
                serde_json::from_slice(&serde_json::to_vec(&rec).expect("encoded"))
                    .expect("decoded")
            },
        )
}

fn range() -> impl Strategy<Value = Option<Range>> {
    prop_oneof![
        Just(None),
        (any::<u64>(), proptest::option::of(any::<u64>()))
            .prop_map(|(first, last)| Some(Range::Int { first, last })),
        any::<u64>().prop_map(|last| Some(Range::Suffix { length: last })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn answers_from_any_record_are_made_and_written(
        rec in record(),
        range in range(),
        part in proptest::option::of(any::<i32>()),
        url in any::<bool>(),
    ) {
        let _ = rec.validate();
        let _ = rec.layout();
        for f in [TimestampFormat::DateTime, TimestampFormat::HttpDate, TimestampFormat::EpochSeconds] {
            let mut out = Vec::new();
            crate::timestamp(rec.last_modified_ms).format(f, &mut out).expect("a time is written");
        }
        let _ = crate::object::wanted(&rec, range.as_ref(), part);
        if let Some(n) = part {
            let _ = crate::object::part_range(&rec, n);
        }
        let encoding = url.then(|| s3s::dto::EncodingType::from_static(s3s::dto::EncodingType::URL));
        let encoder = crate::list::Encoder::new(encoding.as_ref()).expect("url is known");
        let listing = ListObjectsV2Output {
            contents: Some(vec![crate::list::object(&rec, &encoder, true)]),
            ..Default::default()
        };
        let mut xml = Vec::new();
        listing.serialize(&mut s3s::xml::Serializer::new(&mut xml)).expect("a listing is written");
    }
}
