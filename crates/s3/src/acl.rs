//! ACLs, answered as S3 answers a bucket whose object ownership is "bucket owner
//! enforced" (ACLs disabled, the default of new AWS buckets since 2023): reads of an ACL
//! show the owner with full control; an ACL that gives the owner alone full control (the
//! canned `bucket-owner-full-control` or `private`, or a document granting the owner full
//! control) is taken and changes nothing; any other is refused with
//! `AccessControlListNotSupported` (on `CreateBucket`,
//! `InvalidBucketAclWithObjectOwnership`). S3 itself refuses `private` too; OED takes it
//! because clients send it by default (rclone does) and it grants nobody else anything. Who may do what is the account table's
//! ([`crate::access`]) and the bucket policy's ([`crate::policy`]).

use s3s::dto::{Grant, Grantee, Permission, Type};
use s3s::{S3Error, S3ErrorCode};

use crate::bucket::owner;
use crate::err;

/// The one grant every bucket and object shows: its owner's full control.
pub(crate) fn grants() -> Vec<Grant> {
    let o = owner();
    vec![Grant {
        grantee: Some(Grantee {
            display_name: o.display_name,
            email_address: None,
            id: o.id,
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }]
}

/// Canned ACLs taken with ACLs disabled: those that give the owner alone full control.
fn owner_only(canned: &str) -> bool {
    matches!(canned, "bucket-owner-full-control" | "private")
}

/// Headers that grant to named parties.
const GRANT_HEADERS: &[&str] = &[
    "x-amz-grant-full-control",
    "x-amz-grant-read",
    "x-amz-grant-read-acp",
    "x-amz-grant-write",
    "x-amz-grant-write-acp",
];

/// The refusal of an ACL set with operation `op` (`PutObject`, `CreateBucket`,
/// `PutBucketAcl`...) in its headers, or `None` when it has none or one that grants only
/// the owner (a document in the body is [`put_document`]'s).
#[must_use]
pub(crate) fn refused(op: &str, headers: &http::HeaderMap) -> Option<S3Error> {
    let canned = headers
        .get("x-amz-acl")
        .map(|v| v.to_str().unwrap_or("(not text)"));
    let grants = GRANT_HEADERS.iter().find(|h| headers.contains_key(**h));
    let what = match (canned, grants) {
        (Some(c), _) if !owner_only(c) => format!("the canned ACL {c:?}"),
        (_, Some(h)) => format!("the header {h}"),
        _ => return None,
    };
    Some(if op == "CreateBucket" {
        err(
            S3ErrorCode::InvalidBucketAclWithObjectOwnership,
            format!(
                "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting ({what}); use a bucket policy or `oedd admin bucket allow`"
            ),
        )
    } else {
        err(
            S3ErrorCode::AccessControlListNotSupported,
            format!(
                "The bucket does not allow ACLs ({what}); use a bucket policy or `oedd admin bucket allow`"
            ),
        )
    })
}

/// Refuses an `AccessControlPolicy` document that grants anyone but the owner, or anything
/// but full control (S3 takes, with ACLs disabled, only the equivalent of
/// `bucket-owner-full-control`).
///
/// # Errors
/// `AccessControlListNotSupported`.
pub(crate) fn put_document(doc: Option<&s3s::dto::AccessControlPolicy>) -> s3s::S3Result<()> {
    let Some(doc) = doc else { return Ok(()) };
    let owner_id = owner().id;
    let owner_only = doc.grants.as_ref().is_some_and(|g| {
        !g.is_empty()
            && g.iter().all(|g| {
                g.grantee
                    .as_ref()
                    .is_some_and(|e| e.id == owner_id && e.type_.as_str() == Type::CANONICAL_USER)
                    && g.permission
                        .as_ref()
                        .is_some_and(|p| p.as_str() == Permission::FULL_CONTROL)
            })
    });
    if owner_only {
        return Ok(());
    }
    Err(err(
        S3ErrorCode::AccessControlListNotSupported,
        "The bucket does not allow ACLs (an access control policy granting others); use a bucket policy or `oedd admin bucket allow`",
    ))
}

/// Operations whose headers may carry an ACL.
pub(crate) fn sets_acl(op: &str) -> bool {
    matches!(
        op,
        "PutObject"
            | "CopyObject"
            | "CreateMultipartUpload"
            | "CreateBucket"
            | "PutBucketAcl"
            | "PutObjectAcl"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    http::HeaderName::from_static(k),
                    http::HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    #[test]
    fn only_acls_that_grant_the_owner_alone_pass() {
        assert!(refused("PutObject", &headers(&[])).is_none());
        assert!(refused("PutObject", &headers(&[("x-amz-acl", "private")])).is_none());
        assert!(refused("CreateBucket", &headers(&[("x-amz-acl", "private")])).is_none());
        assert!(
            refused(
                "PutObject",
                &headers(&[("x-amz-acl", "bucket-owner-full-control")])
            )
            .is_none()
        );
        let e = refused("PutObject", &headers(&[("x-amz-acl", "public-read")])).unwrap();
        assert_eq!(*e.code(), S3ErrorCode::AccessControlListNotSupported);
        assert!(e.message().unwrap().contains("public-read"));
        let e = refused("CreateBucket", &headers(&[("x-amz-grant-read", "uri=x")])).unwrap();
        assert_eq!(*e.code(), S3ErrorCode::InvalidBucketAclWithObjectOwnership);
    }
}
