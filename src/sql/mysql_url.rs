//! [`MySqlUrl`]: the connection URL of a source, validated, with its password kept out of sight.
//!
//! # Invariant
//! The password never leaves through `Display` or `Debug`: both print `user:****@`, so a
//! statement can be logged, shown in `SHOW SOURCES` or put into an error without leaking it.
//! Only [`MySqlUrl::expose`] and [`MySqlUrl::opts`] (for connecting) give the real text.
//!
//! Masking works on the text, not on a parsed URL, so it also covers URLs `mysql_async` rejects
//! (which are exactly the ones error messages print). It masks everything between the first `:`
//! of the user info and the *last* `@`: a password holding an unencoded `@` or `/` is still
//! masked whole, at worst together with a little of what follows.

use std::fmt;

use mysql_async::Opts;

/// What a masked password prints as.
const MASK: &str = "****";

/// A `mysql://user:password@host:port[/db][?params]` URL that `mysql_async` accepts, or one
/// naming several servers (`mysql://user:password@a:3306,b:3306[/db][?params]`): the same
/// user, password, database and parameters for each, the first one first.
#[derive(Clone)]
pub struct MySqlUrl {
    url: String,
    /// Parsed once, so connecting cannot fail on the text again.
    opts: Opts,
    /// The URL of each server it names, in order (the URL itself when it names one).
    hosts: Vec<String>,
}

impl PartialEq for MySqlUrl {
    fn eq(&self, other: &Self) -> bool {
        self.url == other.url
    }
}

impl Eq for MySqlUrl {}

impl MySqlUrl {
    /// Validates `url` with [`Opts::from_url`]; the error's `Err` text is the reason only (it
    /// never echoes the URL), so callers can name the URL masked next to it.
    pub fn parse(url: &str) -> Result<Self, String> {
        let hosts = split_hosts(url);
        if hosts.len() > 1
            && hosts.iter().any(|h| {
                let (start, end) = host_span(h);
                start == end
            })
        {
            return Err("an empty server in the URL's list of servers".into());
        }
        let mut opts = None;
        for host in &hosts {
            let parsed = Opts::from_url(host).map_err(|e| e.to_string())?;
            opts.get_or_insert(parsed);
        }
        let opts = opts.ok_or_else(|| "the URL names no server".to_string())?;
        Ok(Self {
            url: url.to_string(),
            opts,
            hosts,
        })
    }

    /// The URL of each server this one names, password included: for connecting only.
    pub fn host_urls(&self) -> &[String] {
        &self.hosts
    }

    /// The URL as written, password included: for connecting only.
    pub fn expose(&self) -> &str {
        &self.url
    }

    /// The connection options the URL stands for.
    pub fn opts(&self) -> &Opts {
        &self.opts
    }

    /// The URL with its password (if any) replaced by `****`.
    pub fn masked(&self) -> String {
        mask_password(&self.url)
    }
}

impl fmt::Display for MySqlUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked())
    }
}

impl fmt::Debug for MySqlUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MySqlUrl").field(&self.masked()).finish()
    }
}

/// Where the servers of `url` are written: `(start, end)` of the text between the user info
/// and the path or parameters. The user info ends at the *last* `@`, as for masking.
fn host_span(url: &str) -> (usize, usize) {
    let start = url.find("://").map_or(0, |i| i + 3);
    let hosts = start + url[start..].rfind('@').map_or(0, |i| i + 1);
    let end = hosts + url[hosts..].find(['/', '?']).unwrap_or(url.len() - hosts);
    (hosts, end)
}

/// The URL once per server of a multi-server URL (`a:3306,b:3306`), everything else kept; a
/// URL of one server as it is.
pub fn split_hosts(url: &str) -> Vec<String> {
    let (start, end) = host_span(url);
    let hosts = &url[start..end];
    if !hosts.contains(',') {
        return vec![url.to_string()];
    }
    hosts
        .split(',')
        .map(|host| format!("{}{}{}", &url[..start], host.trim(), &url[end..]))
        .collect()
}

/// One URL naming the servers of `urls` (each naming one, alike but for it), in order: the
/// first's user info, path and parameters with every server. The inverse of [`split_hosts`].
pub fn join_hosts(urls: &[String]) -> String {
    let Some(first) = urls.first() else {
        return String::new();
    };
    let hosts: Vec<&str> = urls
        .iter()
        .map(|u| {
            let (s, e) = host_span(u);
            &u[s..e]
        })
        .collect();
    let (start, end) = host_span(first);
    format!("{}{}{}", &first[..start], hosts.join(","), &first[end..])
}

/// `scheme://user:password@rest` as `scheme://user:****@rest`; text without a password is
/// returned unchanged. See the module docs for why the *last* `@` ends the password.
pub fn mask_password(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let Some(at) = rest.rfind('@') else {
        return url.to_string();
    };
    let Some(colon) = rest[..at].find(':') else {
        return url.to_string();
    };
    format!("{}{}:{MASK}{}", &url[..start], &rest[..colon], &rest[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_the_password_and_keeps_the_rest() {
        assert_eq!(
            mask_password("mysql://cdc:secret@db.example:3306/shop?prefer_socket=false"),
            "mysql://cdc:****@db.example:3306/shop?prefer_socket=false"
        );
        assert_eq!(mask_password("mysql://cdc@db:3306"), "mysql://cdc@db:3306");
        assert_eq!(mask_password("mysql://db:3306/x"), "mysql://db:3306/x");
        assert_eq!(mask_password("not a url"), "not a url");
    }

    #[test]
    fn masks_passwords_with_at_signs_and_slashes_whole() {
        assert_eq!(
            mask_password("mysql://u:p@ss/w:rd@h:1"),
            "mysql://u:****@h:1"
        );
        assert_eq!(mask_password("u:secret@h"), "u:****@h");
        // Over-masking is the safe direction: an `@` after the host hides the host too.
        assert_eq!(mask_password("mysql://u:pw@h/db?x=a@b"), "mysql://u:****@b");
    }

    #[test]
    fn display_and_debug_never_show_the_password() {
        let url = MySqlUrl::parse("mysql://cdc:hunter2@127.0.0.1:3306/shop").unwrap();
        assert_eq!(url.to_string(), "mysql://cdc:****@127.0.0.1:3306/shop");
        assert!(!format!("{url:?}").contains("hunter2"));
        assert!(url.expose().contains("hunter2"));
        assert_eq!(url.opts().pass(), Some("hunter2"));
        assert_eq!(url.opts().tcp_port(), 3306);
    }

    #[test]
    fn a_url_may_name_several_servers() {
        let url =
            MySqlUrl::parse("mysql://cdc:p@ss@10.0.0.1:3306, db-2:3307/shop?prefer_socket=false")
                .unwrap();
        assert_eq!(
            url.host_urls(),
            [
                "mysql://cdc:p@ss@10.0.0.1:3306/shop?prefer_socket=false",
                "mysql://cdc:p@ss@db-2:3307/shop?prefer_socket=false"
            ]
        );
        assert_eq!(url.opts().tcp_port(), 3306);
        assert_eq!(
            url.to_string(),
            "mysql://cdc:****@10.0.0.1:3306, db-2:3307/shop?prefer_socket=false"
        );
        assert_eq!(
            join_hosts(url.host_urls()),
            "mysql://cdc:p@ss@10.0.0.1:3306,db-2:3307/shop?prefer_socket=false"
        );
        let one = MySqlUrl::parse("mysql://u@h:1").unwrap();
        assert_eq!(one.host_urls(), ["mysql://u@h:1"]);
        assert_eq!(
            split_hosts("mysql://a:1,b:2"),
            ["mysql://a:1", "mysql://b:2"]
        );
        assert!(MySqlUrl::parse("mysql://u:p@a:1,b:99999").is_err());
        assert!(MySqlUrl::parse("mysql://u:p@a:1,,b:2").is_err());
    }

    #[test]
    fn rejects_what_mysql_async_rejects() {
        let err = MySqlUrl::parse("postgres://u:p@h:5432").unwrap_err();
        assert!(
            err.contains("Unsupported connection URL scheme `postgres'"),
            "{err}"
        );
        assert!(MySqlUrl::parse("mysql://").is_err());
        assert!(MySqlUrl::parse("mysql://u:p@h:99999").is_err());
    }
}
