//! Entry points for the fuzz targets in `fuzz/`, and for the test that replays their
//! corpora on stable Rust (`tests/fuzz_corpus.rs`): each takes arbitrary bytes as they
//! would arrive from the network or a disk, runs one of the daemon's parsers, and then
//! what the daemon does with what it parsed. None may panic, loop or allocate without
//! bound, whatever the bytes; a refusal is an `Err`, never a crash.

use oed_model::record::{ObjectRecord, RecordTail};

/// The cluster map (TOML, from a file or `POST admin/map`): parsed, validated, and, when
/// valid, its digest, URLs and a placement computed.
pub fn cluster_map(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(map) = toml::from_str::<oed_model::map::ClusterMap>(text) else {
        return;
    };
    if map.validate().is_err() {
        return;
    }
    let _ = map.digest();
    for d in &map.drives {
        let _ = (d.url(map.tls), d.domain());
    }
    let n = usize::from(map.profile.k) + usize::from(map.profile.m);
    let _ = map.place("bucket", "key", n);
}

/// An object record as JSON (a peer request's `record`, a drive's `objects` column
/// family): parsed, validated, and what readers compute from it.
pub fn object_record(data: &[u8]) {
    let Ok(rec) = serde_json::from_slice::<ObjectRecord>(data) else {
        return;
    };
    record_uses(&rec);
}

/// What reads, ranges and parts compute from a record that parsed.
fn record_uses(rec: &ObjectRecord) {
    let _ = rec.validate();
    let _ = rec.layout();
    let size = rec.object_size();
    for e in oed_cluster::read::extents(rec) {
        let _ = e.size;
    }
    for n in [1, 2, i32::MAX] {
        let _ = oed_s3::object::part_range(rec, n);
    }
    let _ = oed_s3::multipart::copy_range("bytes=0-0", size);
}

/// A drive's kept version (the `kept` column family): decoded, and its record used.
pub fn kept(data: &[u8]) {
    if let Ok(k) = oed_store::Kept::decode(data) {
        record_uses(&k.record);
    }
}

/// A shard upload's body as a drive receives it: a shard file, checked frame by frame as
/// it arrives in pieces of the sizes the first two bytes give, then the record tail
/// (JSON) after it, and for a sealed upload (the second byte's top bit) the seal's tag
/// after that, checked before the tail is read.
pub fn shard_upload(data: &[u8]) {
    let Some((&[a, b], rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    // The top bit of the second byte: a sealed upload, whose tag ends the body.
    let piece = usize::from(u16::from_le_bytes([a, b & 0x7f])).max(1);
    let mut seal = (b & 0x80 != 0).then(|| oed_model::seal::Seal::new(&[7; 32]));
    let mut verifier = oed_ec::StreamVerifier::new();
    let mut at = 0;
    let mut file_len = None;
    while at < rest.len() {
        if let Some(h) = verifier.header() {
            file_len.get_or_insert(h.file_len());
        }
        let room = file_len.map_or(u64::MAX, |l| l - verifier.bytes_seen());
        let end = (at + piece).min(rest.len());
        let take = end.min(at.saturating_add(usize::try_from(room).unwrap_or(usize::MAX)));
        if take == at {
            break;
        }
        if verifier.feed(&rest[at..take]).is_err() {
            return;
        }
        if let Some(s) = &mut seal {
            s.update(&rest[at..take]);
        }
        at = take;
    }
    if verifier.finish().is_err() {
        return;
    }
    let after = &rest[at..];
    let tail = match seal {
        Some(mut s) => {
            let Some(cut) = after.len().checked_sub(oed_model::seal::TAG_LEN) else {
                return;
            };
            let (tail, tag) = after.split_at(cut);
            s.update(tail);
            if !s.verify(tag) {
                return;
            }
            tail
        }
        None => after,
    };
    let _ = serde_json::from_slice::<RecordTail>(tail);
}

/// The XML bodies S3 clients send: `DeleteObjects` (first byte even) or
/// `CompleteMultipartUpload` (odd), parsed as `s3s` parses them, then checked as OED
/// checks them (keys; parts against stored ones).
pub fn s3_xml(data: &[u8]) {
    let Some((&which, xml)) = data.split_first() else {
        return;
    };
    if which % 2 == 0 {
        if let Some(delete) = parse_xml::<s3s::dto::Delete>(xml) {
            for o in &delete.objects {
                let _ = oed_s3::check_user_key(&o.key);
            }
        }
    } else if let Some(done) = parse_xml::<s3s::dto::CompletedMultipartUpload>(xml) {
        let asked = done.parts.unwrap_or_default();
        let stored: Vec<ObjectRecord> = (1..=3)
            .map(|n| {
                oed_model::record::test_record(
                    &oed_cluster::write::part_key("upload", n),
                    u128::from(n.unsigned_abs()),
                    5 << 20,
                )
            })
            .collect();
        let _ = oed_s3::multipart::resolve_parts(&asked, &stored);
    }
}

/// `s3s`' XML parse of a whole body.
fn parse_xml<T: for<'x> s3s::xml::Deserialize<'x>>(xml: &[u8]) -> Option<T> {
    let mut d = s3s::xml::Deserializer::new(xml);
    let v = T::deserialize(&mut d).ok()?;
    d.expect_eof().ok()?;
    Some(v)
}

/// Ranges and headers: the first line is a `Range` (parsed, judged usable or not, and
/// applied to objects of several sizes), the second an `x-amz-copy-source-range` and an
/// `x-amz-copy-source`; the rest are `name: value` header lines, checked as the S3 front
/// end checks them before anything else (header section size, presigned expiry, signed
/// region, user metadata, body length).
pub fn ranges_and_headers(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines();
    let range = lines.next().unwrap_or_default();
    let copy = lines.next().unwrap_or_default();
    let mut headers = http::HeaderMap::new();
    let mut meta = s3s::dto::Metadata::new();
    for line in lines.take(64) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.trim().as_bytes()),
            http::HeaderValue::from_str(value.trim()),
        ) {
            if let Some(m) = n.as_str().strip_prefix("x-amz-meta-") {
                meta.insert(m.to_owned(), value.trim().to_owned());
            }
            headers.append(n, v);
        }
    }
    if let Ok(v) = http::HeaderValue::from_str(range) {
        headers.insert(http::header::RANGE, v);
    }
    let _ = oed_s3::range::unusable(
        &http::Method::GET,
        &http::Uri::from_static("/bucket/key"),
        &headers,
    );
    let parsed = s3s::dto::Range::parse(range).ok();
    for size in [0, 1, 10, 5 << 30, u64::MAX] {
        let rec = oed_model::record::test_record("k", 1, size);
        let _ = oed_s3::object::wanted(&rec, parsed.as_ref(), None);
        let _ = oed_s3::object::wanted(&rec, None, Some(1));
        let _ = oed_s3::multipart::copy_range(copy, size);
    }
    let _ = s3s::dto::CopySource::parse(copy);
    let uri: http::Uri = format!("/b/k?{}", copy.replace(' ', "%20"))
        .parse()
        .unwrap_or_else(|_| http::Uri::from_static("/"));
    let _ = oed_s3::header_section_too_large(&headers);
    let _ = oed_s3::presigned_expires(&uri);
    let _ = oed_s3::check_region(&headers, &uri, "us-east-1");
    let _ = oed_s3::object::user_meta(Some(meta));
    let length = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<i64>().ok());
    let _ = oed_s3::object::body_length(length, &headers);
}

/// A bucket policy (`PutBucketPolicy`'s body, and the account table's policy entries):
/// parsed for bucket `b`, and when taken, asked about keys and prefixes made of its own
/// bytes (the wildcard matcher sees patterns and names it did not choose).
pub fn bucket_policy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = oed_model::policy::Policy::parse("b", text) {
        let _ = p.is_public();
        let half = text.get(..text.len() / 2).unwrap_or("");
        for probe in [text, "", "a", half] {
            let _ = p.allows_get(probe);
            let _ = p.allows_list(probe);
        }
    }
    if let Some((pattern, name)) = text.split_once('\n') {
        let _ = oed_model::policy::glob(pattern, name);
    }
}

#[cfg(test)]
mod tests {
    /// A target's name (its corpus directory) and entry point.
    type Target = (&'static str, fn(&[u8]));

    /// Every input kept in `fuzz/corpus/TARGET/` (the seeds, what libFuzzer found worth
    /// keeping, and every input that once crashed a target) runs through its entry point
    /// on stable Rust, in every test run.
    #[test]
    fn the_fuzz_corpora_run_without_a_panic() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
        let targets: [Target; 6] = [
            ("cluster_map", super::cluster_map),
            ("object_record", super::object_record),
            ("kept", super::kept),
            ("shard_upload", super::shard_upload),
            ("s3_xml", super::s3_xml),
            ("ranges_and_headers", super::ranges_and_headers),
        ];
        for (name, run) in targets {
            let dir = root.join(name);
            let mut n = 0;
            for entry in
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            {
                let path = entry.unwrap().path();
                run(&std::fs::read(&path).unwrap());
                n += 1;
            }
            assert!(n >= 3, "{name}: only {n} inputs in {}", dir.display());
        }
    }
}
