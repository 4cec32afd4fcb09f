//! PROPFIND (RFC 4918 9.1) at depth 0 and 1: the properties gfal2 and davix
//! read (resource type, length, last modified, creation date, ETag, the
//! executable bit) for what the path names and, at depth 1, each entry of a
//! directory. A request's body may ask for some properties; every answer
//! carries this set (a `propname` or `allprop` is answered the same way).

use std::os::unix::fs::MetadataExt;

use super::auth::Op;
use super::dav::{etag, http_date, open_existing, Answer, Reply, Request};
use super::path::href_of;

/// Most entries one depth-1 answer lists.
const ENTRIES_MAX: usize = 1_000_000;

/// Answer a PROPFIND.
pub fn propfind(req: &mut Request, _body: &[u8]) -> Result<Answer, Answer> {
    let depth = req.head.header("depth").unwrap_or("1").to_ascii_lowercase();
    let depth = match depth.as_str() {
        "0" => 0,
        "1" => 1,
        _ => {
            return Err(Answer::text(
                403,
                "PROPFIND of depth infinity is not served (propfind-finite-depth): ask depth 1",
            ))
        }
    };
    let rel = req.rel.clone();
    req.allow(if depth == 0 { Op::Stat } else { Op::Read }, &rel)?;
    let file = open_existing(req)?;
    let meta = file
        .metadata()
        .map_err(|e| Answer::text(500, &format!("/{rel}: {e}")))?;
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\" xmlns:lp1=\"DAV:\" xmlns:lp2=\"http://apache.org/dav/props/\">\n");
    response(&mut xml, &rel, &meta);
    if depth == 1 && meta.is_dir() {
        entries(req, &rel, &mut xml)?;
    }
    xml.push_str("</D:multistatus>\n");
    let mut a = Answer::new(207).with("Content-Type", "application/xml; charset=utf-8");
    a.body = Reply::Bytes(xml.into_bytes());
    Ok(a)
}

/// One `<D:response>` per entry of directory `rel` (those that vanish
/// meanwhile, or are urmove's own, are left out).
fn entries(req: &Request, rel: &str, xml: &mut String) -> Result<(), Answer> {
    let root = &req.front.root;
    let at = if rel.is_empty() { "." } else { rel };
    let mut names = root
        .read_dir(at)
        .map_err(|e| super::dav::not_found_or(rel, &e))?;
    names.sort();
    for name in names.into_iter().take(ENTRIES_MAX) {
        if crate::protocol::manifest::is_reserved(&name) {
            continue;
        }
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if let Ok(meta) = root.symlink_metadata(&child) {
            response(xml, &child, &meta);
        }
    }
    Ok(())
}

/// The properties of one entry.
fn response(xml: &mut String, rel: &str, meta: &std::fs::Metadata) {
    let dir = meta.is_dir();
    let href = escape(&href_of(rel, dir));
    let name = escape(rel.rsplit('/').next().unwrap_or(""));
    let kind = if dir { "<D:collection/>" } else { "" };
    let length = if dir { 0 } else { meta.len() };
    let exec = if meta.mode() & 0o100 != 0 { "T" } else { "F" };
    xml.push_str(&format!(
        "<D:response><D:href>{href}</D:href><D:propstat><D:prop>\
<D:displayname>{name}</D:displayname>\
<lp1:resourcetype>{kind}</lp1:resourcetype>\
<lp1:getcontentlength>{length}</lp1:getcontentlength>\
<lp1:getlastmodified>{}</lp1:getlastmodified>\
<lp1:creationdate>{}</lp1:creationdate>\
<lp1:getetag>{}</lp1:getetag>\
<lp1:iscollection>{}</lp1:iscollection>\
<lp2:executable>{exec}</lp2:executable>\
<lp1:getcontenttype>{}</lp1:getcontenttype>\
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>\n",
        http_date(meta.mtime()),
        iso_date(meta.ctime()),
        escape(&etag(meta)),
        u8::from(dir),
        if dir {
            "httpd/unix-directory"
        } else {
            "application/octet-stream"
        },
    ));
}

/// RFC 3339 in UTC, as `creationdate` wants it.
fn iso_date(secs: i64) -> String {
    // From the IMF-fixdate's parts: "Sun, 06 Nov 1994 08:49:37 GMT".
    let d = http_date(secs);
    let p: Vec<&str> = d.split(' ').collect();
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == p[2])
    .unwrap_or(0)
        + 1;
    format!("{}-{month:02}-{}T{}Z", p[3], p[1], p[4])
}

/// Text escaped for XML.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_escapes() {
        assert_eq!(iso_date(784_111_777), "1994-11-06T08:49:37Z");
        assert_eq!(escape("a<&>\"b"), "a&lt;&amp;&gt;&quot;b");
    }
}
