//! The account table across drives (`oed_cluster::accounts`): a change made on one drive
//! is in force on every drive that is up within 5 s, a drive that was down learns what it
//! missed when it starts, and no drive takes an entry the cluster did not sign.

use std::time::{Duration, Instant};

use oed_model::account::{AccessKey, AccountEntry, AccountKeys, BucketAccess, Rights};
use oed_model::drive::ErrorCode;
use oed_model::record::VersionId;
use oed_tests::{LocalDrive, SECRET, local_cluster};

const SPREAD: Duration = Duration::from_secs(5);

fn key_entry(id: &str, deleted: bool) -> AccountEntry {
    let keys = AccountKeys::derive(SECRET.as_bytes());
    AccountEntry::Key(AccessKey {
        id: id.into(),
        name: format!("key {id}"),
        secret: if deleted {
            String::new()
        } else {
            keys.seal(id, "a secret of forty characters, near enough")
        },
        created_ms: 1,
        deleted,
        version: VersionId(0),
    })
}

fn grant(bucket: &str, id: &str, rights: Rights) -> AccountEntry {
    AccountEntry::Bucket(BucketAccess {
        bucket: bucket.into(),
        grants: [(id.to_string(), rights)].into(),
        version: VersionId(0),
    })
}

/// Waits (at most [`SPREAD`]) until `ok` holds on every drive of `drives`.
async fn on_every_drive_within_spread(
    drives: &[&LocalDrive],
    what: &str,
    ok: impl Fn(&LocalDrive) -> bool,
) {
    let start = Instant::now();
    loop {
        if drives.iter().all(|d| ok(d)) {
            return;
        }
        assert!(
            start.elapsed() < SPREAD,
            "{what}: not on every drive within {SPREAD:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_reaches_every_drive_and_a_drive_that_was_down_learns_it_at_start() {
    let root = tempfile::tempdir().unwrap();
    let mut drives = local_cluster(root.path(), 2, 1, 4096).await;
    let (a, b) = (&drives[0], &drives[1]);

    let read = Rights {
        read: true,
        ..Rights::default()
    };
    let (stored, sync) = a
        .cluster
        .change_accounts(vec![
            key_entry("OEDTESTKEY0000000001", false),
            grant("b1", "OEDTESTKEY0000000001", read),
        ])
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    assert_eq!((sync.answered, sync.unreachable), (2, 0), "{sync:?}");
    let all: Vec<&LocalDrive> = drives.iter().collect();
    on_every_drive_within_spread(&all, "a new key and its grant", |d| {
        d.cluster.accounts().rights("OEDTESTKEY0000000001", "b1") == read
    })
    .await;
    let digest = a.cluster.accounts().digest();
    assert_eq!(b.cluster.accounts().digest(), digest);

    // The third drive goes down; the key is revoked and another made meanwhile.
    let mut down = drives.pop().unwrap();
    down.down().await;
    let (_, sync) = drives[0]
        .cluster
        .change_accounts(vec![
            key_entry("OEDTESTKEY0000000001", true),
            key_entry("OEDTESTKEY0000000002", false),
        ])
        .await
        .unwrap();
    assert_eq!((sync.answered, sync.unreachable), (1, 1), "{sync:?}");
    let up: Vec<&LocalDrive> = drives.iter().collect();
    on_every_drive_within_spread(&up, "the revocation", |d| {
        d.cluster.accounts().key("OEDTESTKEY0000000001").is_none()
    })
    .await;

    // It comes back with its old table and learns the change from the others.
    let back = down.restart().await;
    on_every_drive_within_spread(&[&back], "what a drive missed while down", |d| {
        let t = d.cluster.accounts();
        t.key("OEDTESTKEY0000000001").is_none()
            && t.key("OEDTESTKEY0000000002").is_some()
            && t.rights("OEDTESTKEY0000000001", "b1") == Rights::default()
    })
    .await;
    assert_eq!(
        back.cluster.accounts().digest(),
        drives[0].cluster.accounts().digest()
    );

    // A change the newest drive makes wins over the entry it replaces, wherever made.
    let (_, _) = back
        .cluster
        .change_accounts(vec![grant("b1", "OEDTESTKEY0000000002", Rights::ALL)])
        .await
        .unwrap();
    let all = [&drives[0], &drives[1], &back];
    on_every_drive_within_spread(&all, "a grant made on the drive that was down", |d| {
        d.cluster.accounts().rights("OEDTESTKEY0000000002", "b1") == Rights::ALL
    })
    .await;
    drives.push(back);
    for d in drives {
        d.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_drive_takes_an_entry_the_cluster_did_not_sign() {
    let root = tempfile::tempdir().unwrap();
    let drives = local_cluster(root.path(), 2, 1, 4096).await;
    let peer = drives[0].cluster.map().at(1).clone();
    let forged = AccountKeys::derive(b"not this cluster's secret at all")
        .sign(key_entry("OEDFORGEDKEY00000001", false));
    let e = peer
        .merge_accounts(std::slice::from_ref(&forged))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadRequest, "{e}");
    assert!(
        e.message.contains("not signed with this cluster's key"),
        "{e}"
    );
    let mut altered = AccountKeys::derive(SECRET.as_bytes()).sign(grant(
        "b1",
        "OEDTESTKEY0000000001",
        Rights::default(),
    ));
    if let AccountEntry::Bucket(b) = &mut altered.entry {
        b.grants.insert("OEDTESTKEY0000000001".into(), Rights::ALL);
    }
    assert_eq!(
        peer.merge_accounts(&[altered]).await.unwrap_err().code,
        ErrorCode::BadRequest
    );
    let genuine =
        AccountKeys::derive(SECRET.as_bytes()).sign(key_entry("OEDTESTKEY0000000003", false));
    assert_eq!(
        peer.merge_accounts(&[genuine.clone(), forged])
            .await
            .unwrap_err()
            .code,
        ErrorCode::BadRequest,
        "a batch with one bad entry takes none"
    );
    assert!(peer.account_entries().await.unwrap().is_empty());
    assert_eq!(
        peer.merge_accounts(std::slice::from_ref(&genuine))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        peer.merge_accounts(&[genuine]).await.unwrap(),
        0,
        "taken once"
    );
    for d in drives {
        d.stop().await;
    }
}

/// An admin request about accounts (`oedd admin bucket allow`), captured on the network:
/// sent again, it is refused as a replay; changed on the way (another right asked for),
/// it is refused as not signed; in neither case do the key's rights change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_request_sent_again_or_changed_on_the_way_is_refused() {
    use oed_model::account::{AccountAnswer, AccountRequest};
    use oed_peer::PeerOp;
    use oed_peer::auth::PeerKey;
    use oed_peer::client::PeerClient;
    use oed_tests::{Tap, replaced, resend};

    let root = tempfile::tempdir().unwrap();
    let drives = local_cluster(root.path(), 2, 1, 4096).await;
    let (a, b) = (&drives[0], &drives[1]);
    a.cluster.create_bucket("bkt").await.unwrap();
    let AccountAnswer::NewSecret { access_key_id, .. } = a
        .cluster
        .administer(AccountRequest::KeyCreate {
            name: "k".into(),
            id: None,
        })
        .await
        .unwrap()
    else {
        panic!("a new key")
    };
    let read = Rights {
        read: true,
        ..Rights::default()
    };
    let allow = AccountRequest::BucketAllow {
        bucket: "bkt".into(),
        key: access_key_id.clone(),
        rights: read,
    };
    // A key create sent again (its answer lost) to another drive makes no second key.
    let again = AccountRequest::KeyCreate {
        name: "k".into(),
        id: Some(access_key_id.clone()),
    };
    let AccountAnswer::NewSecret { sealed_secret, .. } = b.cluster.administer(again).await.unwrap()
    else {
        panic!("the same key")
    };
    let keys = oed_model::account::AccountKeys::derive(SECRET.as_bytes());
    let first = a
        .cluster
        .accounts()
        .key(&access_key_id)
        .unwrap()
        .secret
        .clone();
    assert_eq!(
        keys.open(&access_key_id, &sealed_secret),
        keys.open(&access_key_id, &first)
    );
    assert_eq!(a.cluster.accounts().keys().len(), 1);
    let taken = AccountRequest::KeyCreate {
        name: "another".into(),
        id: Some(access_key_id.clone()),
    };
    assert!(b.cluster.administer(taken).await.is_err());

    let (b_url, c_url) = (b.url(), drives[2].url());
    let client =
        |tap: &Tap| PeerClient::new(&tap.url, PeerKey::derive(SECRET.as_bytes())).for_drive("d1");

    // Sent again to the drive that took it.
    let tap = Tap::start(&b_url).await;
    let _: AccountAnswer = client(&tap)
        .post_json(PeerOp::AdminAccounts, "", &allow)
        .await
        .unwrap();
    let answer = String::from_utf8_lossy(&resend(&b_url, &tap.sent().concat()).await).into_owned();
    assert!(answer.contains("replayed"), "{answer}");

    // Captured on its way to another drive (which refuses it: it is for d1), changed to
    // ask for the owner right, and sent to d1.
    let tap = Tap::start(&c_url).await;
    let _ = client(&tap)
        .post_json::<_, AccountAnswer>(PeerOp::AdminAccounts, "", &allow)
        .await;
    let sent = tap.sent().concat();
    let changed = replaced(&sent, br#""owner":false"#, br#""owner":true "#);
    let answer = String::from_utf8_lossy(&resend(&b_url, &changed).await).into_owned();
    assert!(answer.contains("401"), "{answer}");
    for d in &drives {
        assert_eq!(d.cluster.accounts().rights(&access_key_id, "bkt"), read);
    }
}
