//! The statements that manage users and their roles, read as PostgreSQL reads them:
//!
//! ```text
//! CREATE USER [IF NOT EXISTS] name [WITH] PASSWORD 'secret' [IN ROLE admin | reader]
//! CREATE ROLE [IF NOT EXISTS] name [WITH] LOGIN PASSWORD 'secret' [IN ROLE admin | reader]
//! ALTER USER | ROLE name [WITH] PASSWORD 'secret'
//! DROP USER | ROLE [IF EXISTS] name [, ...]
//! GRANT admin | reader TO name [, ...]
//! REVOKE admin FROM name [, ...]
//! ```
//!
//! There are two roles, `admin` and `reader` ([`Role`]), and every user holds `reader`:
//! `GRANT reader` changes nothing and `REVOKE reader` is refused. `CREATE USER` is `CREATE
//! ROLE ... LOGIN`, as in PostgreSQL; a role that cannot log in has nothing to do here.
//!
//! # Invariant
//! [`parse_user_statement`] claims a text exactly when it starts with `CREATE`, `ALTER` or
//! `DROP` followed by `USER` or `ROLE`, or with `GRANT` or `REVOKE`; any other text is
//! `Ok(None)`, untouched. sqlparser's PostgreSQL grammar reads `CREATE ROLE`, `ALTER ROLE` and
//! `DROP` (its `CREATE USER` and `ALTER USER` are Snowflake's, so after those two words the
//! role grammar reads the rest, as PostgreSQL's `CREATE USER` is `CREATE ROLE` with `LOGIN`);
//! only the role forms of `GRANT` and `REVOKE`, which sqlparser does not read, are read here on
//! its parser. Every option PostgreSQL has and cdcfusion does not is refused by name
//! (`0A000`), never ignored; options that state what cdcfusion does anyway (`NOSUPERUSER`,
//! `INHERIT`, ...) are accepted. A password is held as [`Password`], which never shows it.

use sqlparser::ast::{
    self, AlterRoleOperation, CreateRole, Expr, Ident, ObjectName, ObjectNamePart, ObjectType,
    RoleOption, Statement, Value,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::ParserError;
use sqlparser::tokenizer::{Location, Token};

use super::error::SqlError;
use super::grammar::{claim, is_keyword, Grammar};
use super::statement::{CreateUser, Password, Role, UserStatement};

/// Which user statement a text starts like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `CREATE USER` (`true`) or `CREATE ROLE`.
    Create {
        user: bool,
    },
    Alter,
    Drop,
    Grant,
    Revoke,
}

impl Kind {
    fn of(words: &[&Token]) -> Option<Self> {
        let at = |i: usize, kw| words.get(i).is_some_and(|t| is_keyword(t, kw));
        let user_or_role = at(1, Keyword::USER) || at(1, Keyword::ROLE);
        if at(0, Keyword::CREATE) && user_or_role {
            Some(Kind::Create {
                user: at(1, Keyword::USER),
            })
        } else if at(0, Keyword::ALTER) && user_or_role {
            Some(Kind::Alter)
        } else if at(0, Keyword::DROP) && user_or_role {
            Some(Kind::Drop)
        } else if at(0, Keyword::GRANT) {
            Some(Kind::Grant)
        } else if at(0, Keyword::REVOKE) {
            Some(Kind::Revoke)
        } else {
            None
        }
    }
}

/// Reads `sql` if it is a user statement (see the module docs); `Ok(None)` for any other text.
pub fn parse_user_statement(sql: &str) -> Result<Option<UserStatement>, SqlError> {
    let dialect = PostgreSqlDialect {};
    let Some((kind, tokens)) = claim(&dialect, sql, Kind::of)? else {
        return Ok(None);
    };
    let mut grammar = Grammar::new(&dialect, tokens);
    let grammar_error = |source: ParserError| SqlError::Grammar { source };
    let statement = match kind {
        Kind::Create { user } => {
            grammar.parser.advance_token();
            grammar.parser.advance_token();
            let create = grammar.parser.parse_create_role().map_err(grammar_error)?;
            UserStatement::Create(create_user(create, user)?)
        }
        Kind::Alter => {
            grammar.parser.advance_token();
            grammar.parser.advance_token();
            match grammar.parser.parse_alter_role().map_err(grammar_error)? {
                Statement::AlterRole { name, operation } => alter_user(&name, operation)?,
                other => unreachable_form(&other)?,
            }
        }
        Kind::Drop => {
            grammar.parser.advance_token();
            match grammar.parser.parse_drop().map_err(grammar_error)? {
                Statement::Drop {
                    object_type: ObjectType::User | ObjectType::Role,
                    if_exists,
                    names,
                    cascade,
                    restrict,
                    purge,
                    temporary: _,
                    table,
                } => {
                    if cascade || restrict || purge || table.is_some() {
                        return Err(unsupported(
                            "CASCADE, RESTRICT, PURGE or ON in DROP USER",
                            None,
                        ));
                    }
                    let names = names.iter().map(object_name).collect::<Result<_, _>>()?;
                    UserStatement::Drop { names, if_exists }
                }
                other => unreachable_form(&other)?,
            }
        }
        Kind::Grant => grammar.grant()?,
        Kind::Revoke => grammar.revoke()?,
    };
    grammar.end_of_statement()?;
    Ok(Some(statement))
}

/// A statement sqlparser's role grammar does not give after the words that were claimed.
fn unreachable_form(_: &Statement) -> Result<UserStatement, SqlError> {
    Err(unsupported("this form of a user statement", None))
}

fn unsupported(feature: &str, hint: Option<&str>) -> SqlError {
    SqlError::Unsupported {
        feature: feature.to_string(),
        hint: hint.map(str::to_string),
        location: None,
    }
}

/// The hint of every option that would make a user more than `admin` or `reader` can say.
const ROLES_HINT: &str = "a user is an admin or a reader: GRANT admin TO name";

/// A user or role name as PostgreSQL resolves it: folded to lower case unless quoted.
fn ident_name(ident: &Ident) -> Result<String, SqlError> {
    let name = match ident.quote_style {
        None => ident.value.to_lowercase(),
        Some(_) => ident.value.clone(),
    };
    if name.is_empty() {
        return Err(SqlError::Syntax {
            expected: "a user name (a quoted name cannot be empty)".into(),
            found: "\"\"".into(),
            location: Some(ident.span.start),
        });
    }
    Ok(name)
}

/// A one-part name (users are not in schemas).
fn object_name(name: &ObjectName) -> Result<String, SqlError> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(ident)] => ident_name(ident),
        _ => Err(SqlError::Syntax {
            expected: "a user name".into(),
            found: name.to_string(),
            location: name
                .0
                .first()
                .and_then(ObjectNamePart::as_ident)
                .map(|i| i.span.start),
        }),
    }
}

/// The role called by `ident`.
fn role_of(ident: &Ident) -> Result<Role, SqlError> {
    let name = ident_name(ident)?;
    Role::named(&name).ok_or(SqlError::UndefinedRole {
        name,
        location: Some(ident.span.start),
    })
}

/// A `PASSWORD` clause's value: a string, and the password itself, not a verifier.
fn password(password: ast::Password) -> Result<Password, SqlError> {
    let expr = match password {
        ast::Password::NullPassword => {
            return Err(unsupported(
                "PASSWORD NULL",
                Some("a user without a password could never log in; DROP USER instead"),
            ))
        }
        ast::Password::Password(expr) => expr,
    };
    let (text, location) = match expr {
        Expr::Value(value) => {
            let location = value.span.start;
            match value.value {
                Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) => (s, location),
                Value::DollarQuotedString(d) => (d.value, location),
                _ => return Err(not_a_password(Some(location))),
            }
        }
        _ => return Err(not_a_password(None)),
    };
    if text.is_empty() {
        return Err(SqlError::InvalidValue {
            option: "PASSWORD",
            message: "a password cannot be empty".into(),
            location: Some(location),
        });
    }
    if is_verifier(&text) {
        return Err(SqlError::Unsupported {
            feature: "a password given already hashed (SCRAM-SHA-256 or md5)".into(),
            hint: Some(
                "give the password itself, over TLS where the network is not trusted; \
                 psql's \\password sends a hash, so use ALTER USER name PASSWORD '...' instead"
                    .into(),
            ),
            location: Some(location),
        });
    }
    Ok(Password::new(text))
}

fn not_a_password(location: Option<Location>) -> SqlError {
    SqlError::InvalidValue {
        option: "PASSWORD",
        message: "expected the password as a string literal".into(),
        location,
    }
}

/// Whether `text` is a password verifier as PostgreSQL's clients send them: PostgreSQL
/// stores those as they are, and cdcfusion would take one for the password itself.
fn is_verifier(text: &str) -> bool {
    let md5 = text
        .strip_prefix("md5")
        .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    md5 || text.starts_with("SCRAM-SHA-256$")
}

/// An option that states what cdcfusion does anyway, or one it refuses (by its name).
fn role_option(option: &RoleOption) -> Result<(), SqlError> {
    let refused = match option {
        RoleOption::Login(true)
        | RoleOption::Inherit(true)
        | RoleOption::SuperUser(false)
        | RoleOption::CreateDB(false)
        | RoleOption::CreateRole(false)
        | RoleOption::Replication(false)
        | RoleOption::BypassRLS(false) => return Ok(()),
        RoleOption::Password(_) => return Ok(()),
        RoleOption::Login(false) => ("NOLOGIN", "DROP USER to stop a user logging in"),
        RoleOption::SuperUser(true) => ("SUPERUSER", ROLES_HINT),
        RoleOption::CreateRole(true) => ("CREATEROLE", ROLES_HINT),
        RoleOption::CreateDB(true) => ("CREATEDB", "databases are sources: an admin creates them"),
        RoleOption::Replication(true) => ("REPLICATION", ROLES_HINT),
        RoleOption::BypassRLS(true) => ("BYPASSRLS", "there is no row-level security"),
        RoleOption::Inherit(false) => (
            "NOINHERIT",
            "there is no SET ROLE: a user's role applies at once",
        ),
        RoleOption::ConnectionLimit(_) => (
            "CONNECTION LIMIT",
            "max_connections in the settings limits every user's connections",
        ),
        RoleOption::ValidUntil(_) => ("VALID UNTIL", "DROP USER when it should no longer log in"),
    };
    Err(unsupported(refused.0, Some(refused.1)))
}

fn create_user(create: CreateRole, user: bool) -> Result<CreateUser, SqlError> {
    let CreateRole {
        names,
        if_not_exists,
        login,
        inherit,
        bypassrls,
        password: given,
        superuser,
        create_db,
        create_role,
        replication,
        connection_limit,
        valid_until,
        in_role,
        in_group,
        role,
        user: members,
        admin,
        authorization_owner,
    } = create;
    let [name] = names.as_slice() else {
        return Err(unsupported(
            "creating several users in one statement",
            Some("one CREATE USER per user"),
        ));
    };
    let name = object_name(name)?;
    // `CREATE USER` logs in unless it says otherwise; `CREATE ROLE` only with `LOGIN`.
    match login {
        Some(true) => {}
        None if user => {}
        Some(false) | None => {
            return Err(unsupported(
                "a role that cannot log in",
                Some("cdcfusion's roles are admin and reader; write CREATE ROLE name LOGIN PASSWORD '...' or CREATE USER"),
            ))
        }
    }
    let flags = [
        inherit.map(RoleOption::Inherit),
        bypassrls.map(RoleOption::BypassRLS),
        superuser.map(RoleOption::SuperUser),
        create_db.map(RoleOption::CreateDB),
        create_role.map(RoleOption::CreateRole),
        replication.map(RoleOption::Replication),
        connection_limit.map(RoleOption::ConnectionLimit),
        valid_until.map(RoleOption::ValidUntil),
    ];
    for flag in flags.iter().flatten() {
        role_option(flag)?;
    }
    if !role.is_empty() || !members.is_empty() || !admin.is_empty() {
        return Err(unsupported(
            "ROLE, USER or ADMIN member lists",
            Some("a user is a member of admin or reader only: IN ROLE admin"),
        ));
    }
    if authorization_owner.is_some() {
        return Err(unsupported("AUTHORIZATION", None));
    }
    let Some(given) = given else {
        return Err(unsupported(
            "a user without a password",
            Some("give it PASSWORD '...'"),
        ));
    };
    // `IN GROUP` is PostgreSQL's old spelling of `IN ROLE`.
    let mut role = Role::Reader;
    for ident in in_role.iter().chain(&in_group) {
        role = role.max(role_of(ident)?);
    }
    Ok(CreateUser {
        name,
        if_not_exists,
        password: password(given)?,
        role,
    })
}

fn alter_user(name: &Ident, operation: AlterRoleOperation) -> Result<UserStatement, SqlError> {
    let name = ident_name(name)?;
    let options = match operation {
        AlterRoleOperation::WithOptions { options } => options,
        AlterRoleOperation::RenameRole { .. } => {
            return Err(unsupported(
                "ALTER USER ... RENAME",
                Some("the md5 password is salted with the name: DROP USER, then CREATE USER"),
            ))
        }
        AlterRoleOperation::Set { .. } | AlterRoleOperation::Reset { .. } => {
            return Err(unsupported(
                "settings per user (ALTER USER ... SET | RESET)",
                Some("SET them in the session"),
            ))
        }
        AlterRoleOperation::AddMember { .. } | AlterRoleOperation::DropMember { .. } => {
            return Err(unsupported(
                "ALTER ROLE ... ADD | DROP MEMBER",
                Some("GRANT admin TO name, REVOKE admin FROM name"),
            ))
        }
    };
    let mut new_password = None;
    for option in options {
        role_option(&option)?;
        if let RoleOption::Password(given) = option {
            new_password = Some(password(given)?);
        }
    }
    Ok(UserStatement::Alter {
        name,
        password: new_password,
    })
}

/// The role forms of `GRANT` and `REVOKE`, on sqlparser's parser (it reads only their
/// privilege forms, which cdcfusion does not have).
impl Grammar<'_> {
    /// `GRANT role [, ...] TO [GROUP] name [, ...]`.
    fn grant(&mut self) -> Result<UserStatement, SqlError> {
        self.expect_keyword(Keyword::GRANT)?;
        let roles = self.roles(Keyword::TO, "GRANT")?;
        let users = self.grantees()?;
        if self.keyword(Keyword::WITH) {
            return Err(unsupported(
                "GRANT ... WITH ADMIN | INHERIT | SET OPTION",
                Some("admins manage every user"),
            ));
        }
        self.no_granted_by()?;
        let role = roles.into_iter().max().unwrap_or(Role::Reader);
        Ok(UserStatement::Grant { role, users })
    }

    /// `REVOKE admin [, ...] FROM [GROUP] name [, ...] [CASCADE | RESTRICT]`.
    fn revoke(&mut self) -> Result<UserStatement, SqlError> {
        self.expect_keyword(Keyword::REVOKE)?;
        if matches!(
            self.parser.peek_nth_token_ref(1).token,
            Token::Word(ref w) if w.keyword == Keyword::OPTION
        ) {
            return Err(unsupported(
                "REVOKE ... OPTION FOR",
                Some("GRANT gives no options to revoke"),
            ));
        }
        let roles = self.roles(Keyword::FROM, "REVOKE")?;
        if roles.contains(&Role::Reader) {
            return Err(unsupported(
                "REVOKE reader",
                Some("every user may read; REVOKE admin leaves a reader, DROP USER ends a user"),
            ));
        }
        let users = self.grantees()?;
        self.no_granted_by()?;
        // With no option granted, no grant depends on another: both mean the same.
        let _ = self.keyword(Keyword::CASCADE) || self.keyword(Keyword::RESTRICT);
        Ok(UserStatement::RevokeAdmin { users })
    }

    /// `role [, ...]` up to `to` (`TO` or `FROM`); anything else is a grant of privileges.
    fn roles(&mut self, to: Keyword, statement: &str) -> Result<Vec<Role>, SqlError> {
        let mut idents = Vec::new();
        loop {
            idents.push(self.ident("a role name: admin or reader")?);
            if !self.parser.consume_token(&Token::Comma) {
                break;
            }
        }
        if !self.keyword(to) {
            return Err(SqlError::Unsupported {
                feature: format!("{statement} of privileges on objects"),
                hint: Some(format!(
                    "a user is an admin or a reader: {statement} admin {} name",
                    if to == Keyword::TO { "TO" } else { "FROM" }
                )),
                location: Some(self.next_location()),
            });
        }
        idents.iter().map(role_of).collect()
    }

    /// `[GROUP] name [, ...]`.
    fn grantees(&mut self) -> Result<Vec<String>, SqlError> {
        let _ = self.keyword(Keyword::GROUP);
        let mut users = Vec::new();
        loop {
            let next = self.parser.peek_token_ref();
            let special = [
                Keyword::PUBLIC,
                Keyword::CURRENT_USER,
                Keyword::SESSION_USER,
                Keyword::CURRENT_ROLE,
            ]
            .into_iter()
            .find(|kw| is_keyword(&next.token, *kw));
            if let Some(keyword) = special {
                return Err(SqlError::Unsupported {
                    feature: format!("{keyword:?} as a grantee"),
                    hint: Some("name the user".into()),
                    location: Some(next.span.start),
                });
            }
            users.push(ident_name(&self.ident("a user name")?)?);
            if !self.parser.consume_token(&Token::Comma) {
                return Ok(users);
            }
        }
    }

    fn no_granted_by(&mut self) -> Result<(), SqlError> {
        if is_keyword(&self.parser.peek_token_ref().token, Keyword::GRANTED) {
            return Err(SqlError::Unsupported {
                feature: "GRANTED BY".into(),
                hint: Some("grants are the admin's who runs them".into()),
                location: Some(self.next_location()),
            });
        }
        Ok(())
    }

    /// One name, quoted or not.
    fn ident(&mut self, what: &str) -> Result<Ident, SqlError> {
        if !matches!(self.parser.peek_token_ref().token, Token::Word(_)) {
            return Err(self.expected(what));
        }
        self.parser
            .parse_identifier()
            .map_err(|source| SqlError::Grammar { source })
    }
}

#[cfg(test)]
mod tests;
