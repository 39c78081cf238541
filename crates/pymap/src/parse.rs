//! The subset's grammar: a source that is exactly one `def name(doc):` whose body assigns
//! names (one target, or several unpacked), branches with `if`/`elif`/`else`, `yield`s
//! a key and a value, `return`s (without a value) and `pass`es; whose expressions read the
//! document and the function's names, build lists and tuples, compare (`==`, `!=`, `<`,
//! `<=`, `>`, `>=`, `in`, `not in`, `is None`, `is not None`), combine with `and`, `or`
//! and `not`, subscript, and call `get` or `split`. Every name is resolved here as Python
//! scopes it (a name assigned anywhere in the function is local to all of it); a name
//! that would reach the globals or builtins refuses the source.

use crate::lex::{Tok, KEYWORDS};

#[derive(Debug, Clone)]
pub(crate) enum Lit {
    None,
    Bool(bool),
    Int(i64),
    Str(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    NotIn,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// `d.get(k)` or `d.get(k, default)`
    Get,
    /// `s.split(sep)`
    Split,
}

#[derive(Debug, Clone)]
pub(crate) enum Expr {
    Lit(Lit),
    /// A local name (the parameter is local 0).
    Local(usize),
    /// A list display (`[a, b]`) or a tuple (`(a, b)`, `a, b`): JSON arrays alike.
    List(Vec<Expr>),
    Index(Box<Expr>, Box<Expr>),
    Call(Box<Expr>, Method, Vec<Expr>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cmp(Cmp, Box<Expr>, Box<Expr>),
    /// `e is None` (`true`) or `e is not None` (`false`).
    IsNone(Box<Expr>, bool),
}

#[derive(Debug, Clone)]
pub(crate) enum Stmt {
    Assign(usize, Expr),
    /// `a, b, _ = e`
    Unpack(Vec<usize>, Expr),
    If(Vec<(Expr, Vec<Stmt>)>, Vec<Stmt>),
    Yield(Expr),
    Return,
    Pass,
}

/// A parsed map function: its body and how many locals it has (the parameter first).
#[derive(Debug, Clone)]
pub(crate) struct Function {
    pub(crate) body: Vec<Stmt>,
    pub(crate) locals: usize,
}

pub(crate) fn parse(tokens: &[Tok]) -> Option<Function> {
    let mut p = Parser {
        t: tokens,
        i: 0,
        locals: Vec::new(),
    };
    p.name("def")?;
    p.ident()?;
    p.op("(")?;
    let param = p.ident()?;
    p.eat_op(",");
    p.op(")")?;
    p.op(":")?;
    // Python decides which names are local before running anything: every name assigned
    // anywhere in the body.
    p.locals.push(param);
    p.locals.extend(assigned(&tokens[p.i..]));
    let body = p.suite()?;
    if p.i != tokens.len() {
        return None; // more than the one function
    }
    Some(Function {
        body,
        locals: p.locals.len(),
    })
}

/// Names assigned in `tokens`: each `name =` or `name, name =` at the start of a line.
fn assigned(tokens: &[Tok]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut start = true;
    let mut i = 0;
    while i < tokens.len() {
        if start {
            let mut j = i;
            let mut names = Vec::new();
            while let Some(Tok::Name(n)) = tokens.get(j) {
                names.push(n.clone());
                j += 1;
                if tokens.get(j) != Some(&Tok::Op(",")) {
                    break;
                }
                j += 1;
            }
            if !names.is_empty() && tokens.get(j) == Some(&Tok::Op("=")) {
                out.extend(
                    names
                        .into_iter()
                        .filter(|n| !KEYWORDS.contains(&n.as_str())),
                );
            }
        }
        start = matches!(tokens[i], Tok::Newline | Tok::Indent | Tok::Dedent)
            || tokens[i] == Tok::Op(":");
        i += 1;
    }
    out.sort();
    out.dedup();
    out
}

struct Parser<'a> {
    t: &'a [Tok],
    i: usize,
    locals: Vec<String>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }

    fn is_name(&self, n: &str) -> bool {
        matches!(self.peek(), Some(Tok::Name(x)) if x == n)
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Some(Tok::Op(x)) if *x == op)
    }

    fn name(&mut self, n: &str) -> Option<()> {
        self.is_name(n).then(|| self.i += 1)
    }

    fn op(&mut self, op: &str) -> Option<()> {
        self.is_op(op).then(|| self.i += 1)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        self.op(op).is_some()
    }

    fn tok(&mut self, t: Tok) -> Option<()> {
        (self.peek() == Some(&t)).then(|| self.i += 1)
    }

    /// A name that is not a keyword.
    fn ident(&mut self) -> Option<String> {
        match self.peek() {
            Some(Tok::Name(n)) if !KEYWORDS.contains(&n.as_str()) => {
                let n = n.clone();
                self.i += 1;
                Some(n)
            }
            _ => None,
        }
    }

    fn local(&self, n: &str) -> Option<usize> {
        self.locals.iter().position(|l| l == n)
    }

    /// After a `:`: one simple statement on the same line, or an indented block.
    fn suite(&mut self) -> Option<Vec<Stmt>> {
        if self.tok(Tok::Newline).is_none() {
            let s = self.simple()?;
            self.tok(Tok::Newline)?;
            return Some(vec![s]);
        }
        self.tok(Tok::Indent)?;
        let mut body = Vec::new();
        while self.tok(Tok::Dedent).is_none() {
            body.push(self.stmt()?);
        }
        Some(body)
    }

    fn stmt(&mut self) -> Option<Stmt> {
        if self.name("if").is_none() {
            let s = self.simple()?;
            self.tok(Tok::Newline)?;
            return Some(s);
        }
        let mut arms = Vec::new();
        loop {
            let cond = self.expr()?;
            self.op(":")?;
            arms.push((cond, self.suite()?));
            if self.name("elif").is_none() {
                break;
            }
        }
        let otherwise = if self.name("else").is_some() {
            self.op(":")?;
            self.suite()?
        } else {
            Vec::new()
        };
        Some(Stmt::If(arms, otherwise))
    }

    fn simple(&mut self) -> Option<Stmt> {
        if self.name("pass").is_some() {
            return Some(Stmt::Pass);
        }
        if self.name("return").is_some() {
            return matches!(self.peek(), Some(Tok::Newline)).then_some(Stmt::Return);
        }
        if self.name("yield").is_some() {
            return Some(Stmt::Yield(self.tuple()?));
        }
        let mut targets = vec![self.ident()?];
        let unpack = self.is_op(",");
        while self.eat_op(",") {
            if self.is_op("=") {
                break;
            }
            targets.push(self.ident()?);
        }
        self.op("=")?;
        let value = self.tuple()?;
        let slots: Vec<usize> = targets
            .iter()
            .map(|n| self.local(n))
            .collect::<Option<_>>()?;
        Some(if unpack {
            Stmt::Unpack(slots, value)
        } else {
            Stmt::Assign(slots[0], value)
        })
    }

    /// An expression, or a tuple of them without parentheses (`a, b`).
    fn tuple(&mut self) -> Option<Expr> {
        let first = self.expr()?;
        if !self.is_op(",") {
            return Some(first);
        }
        let mut items = vec![first];
        while self.eat_op(",") {
            if matches!(self.peek(), Some(Tok::Newline) | Some(Tok::Op("="))) {
                break;
            }
            items.push(self.expr()?);
        }
        Some(Expr::List(items))
    }

    fn expr(&mut self) -> Option<Expr> {
        let mut e = self.and()?;
        while self.name("or").is_some() {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Some(e)
    }

    fn and(&mut self) -> Option<Expr> {
        let mut e = self.not()?;
        while self.name("and").is_some() {
            e = Expr::And(Box::new(e), Box::new(self.not()?));
        }
        Some(e)
    }

    fn not(&mut self) -> Option<Expr> {
        if self.name("not").is_some() {
            return Some(Expr::Not(Box::new(self.not()?)));
        }
        self.comparison()
    }

    /// One comparison at most: Python's chains (`a < b < c`) are outside the subset.
    fn comparison(&mut self) -> Option<Expr> {
        let left = self.primary()?;
        let op = match self.peek() {
            Some(Tok::Op("==")) => Cmp::Eq,
            Some(Tok::Op("!=")) => Cmp::Ne,
            Some(Tok::Op("<")) => Cmp::Lt,
            Some(Tok::Op("<=")) => Cmp::Le,
            Some(Tok::Op(">")) => Cmp::Gt,
            Some(Tok::Op(">=")) => Cmp::Ge,
            Some(Tok::Name(n)) if n == "in" => Cmp::In,
            Some(Tok::Name(n))
                if n == "not"
                    && matches!(self.t.get(self.i + 1), Some(Tok::Name(m)) if m == "in") =>
            {
                self.i += 1; // `not`; `in` below
                Cmp::NotIn
            }
            Some(Tok::Name(n)) if n == "is" => {
                self.i += 1;
                let is = self.name("not").is_none();
                self.name("None")?;
                return self.no_chain(Expr::IsNone(Box::new(left), is));
            }
            _ => return Some(left),
        };
        self.i += 1;
        let right = self.primary()?;
        self.no_chain(Expr::Cmp(op, Box::new(left), Box::new(right)))
    }

    fn no_chain(&self, e: Expr) -> Option<Expr> {
        let chained = match self.peek() {
            Some(Tok::Op(op)) => ["==", "!=", "<", "<=", ">", ">="].contains(op),
            Some(Tok::Name(n)) => ["in", "not", "is"].contains(&n.as_str()),
            _ => false,
        };
        (!chained).then_some(e)
    }

    /// Expressions separated by commas (a trailing one allowed) up to and including
    /// `close`.
    fn items(&mut self, close: &str) -> Option<Vec<Expr>> {
        let mut items = Vec::new();
        while !self.eat_op(close) {
            items.push(self.expr()?);
            if !self.eat_op(",") {
                self.op(close)?;
                break;
            }
        }
        Some(items)
    }

    fn primary(&mut self) -> Option<Expr> {
        let mut e = self.atom()?;
        loop {
            if self.eat_op("[") {
                let index = self.expr()?;
                self.op("]")?;
                e = Expr::Index(Box::new(e), Box::new(index));
            } else if self.eat_op(".") {
                let method = match self.ident()?.as_str() {
                    "get" => Method::Get,
                    "split" => Method::Split,
                    _ => return None,
                };
                self.op("(")?;
                let args = self.items(")")?;
                let arity_ok = match method {
                    Method::Get => (1..=2).contains(&args.len()),
                    Method::Split => args.len() == 1,
                };
                if !arity_ok {
                    return None;
                }
                e = Expr::Call(Box::new(e), method, args);
            } else {
                return Some(e);
            }
        }
    }

    fn atom(&mut self) -> Option<Expr> {
        let t = self.peek()?.clone();
        self.i += 1;
        Some(match t {
            Tok::Int(n) => Expr::Lit(Lit::Int(n)),
            Tok::Op("-") => match self.peek()? {
                Tok::Int(n) => {
                    let n = -*n;
                    self.i += 1;
                    Expr::Lit(Lit::Int(n))
                }
                _ => return None,
            },
            Tok::Str(s) => {
                if matches!(self.peek(), Some(Tok::Str(_))) {
                    return None; // implicit concatenation
                }
                Expr::Lit(Lit::Str(s))
            }
            Tok::Name(n) => match n.as_str() {
                "None" => Expr::Lit(Lit::None),
                "True" => Expr::Lit(Lit::Bool(true)),
                "False" => Expr::Lit(Lit::Bool(false)),
                _ if KEYWORDS.contains(&n.as_str()) => return None,
                _ => Expr::Local(self.local(&n)?),
            },
            Tok::Op("(") => {
                if self.eat_op(")") {
                    return Some(Expr::List(Vec::new()));
                }
                let first = self.expr()?;
                if self.eat_op(")") {
                    return Some(first);
                }
                self.op(",")?;
                let mut items = vec![first];
                items.extend(self.items(")")?);
                Expr::List(items)
            }
            Tok::Op("[") => Expr::List(self.items("]")?),
            _ => return None,
        })
    }
}

/// The document's members the function reads (sorted), or `None` when it uses the
/// document otherwise (whole, as a truth value, with a computed key, …) or rebinds its
/// parameter.
pub(crate) fn doc_reads(f: &Function) -> Option<Vec<String>> {
    let mut names = Vec::new();
    f.body.iter().try_for_each(|s| stmt_reads(s, &mut names))?;
    names.sort();
    names.dedup();
    Some(names)
}

fn stmt_reads(s: &Stmt, names: &mut Vec<String>) -> Option<()> {
    match s {
        Stmt::Assign(slot, e) => {
            if *slot == 0 {
                return None;
            }
            expr_reads(e, names)
        }
        Stmt::Unpack(slots, e) => {
            if slots.contains(&0) {
                return None;
            }
            expr_reads(e, names)
        }
        Stmt::If(arms, otherwise) => {
            for (cond, body) in arms {
                expr_reads(cond, names)?;
                body.iter().try_for_each(|s| stmt_reads(s, names))?;
            }
            otherwise.iter().try_for_each(|s| stmt_reads(s, names))
        }
        Stmt::Yield(e) => expr_reads(e, names),
        Stmt::Return | Stmt::Pass => Some(()),
    }
}

fn expr_reads(e: &Expr, names: &mut Vec<String>) -> Option<()> {
    let is_doc = |e: &Expr| matches!(e, Expr::Local(0));
    let literal = |e: &Expr| match e {
        Expr::Lit(Lit::Str(s)) => Some(s.clone()),
        _ => None,
    };
    match e {
        Expr::Local(0) => None,
        Expr::Lit(_) | Expr::Local(_) => Some(()),
        Expr::Index(obj, key) if is_doc(obj) => {
            names.push(literal(key)?);
            Some(())
        }
        Expr::Call(obj, Method::Get, args) if is_doc(obj) => {
            names.push(literal(&args[0])?);
            args[1..].iter().try_for_each(|a| expr_reads(a, names))
        }
        Expr::Cmp(Cmp::In | Cmp::NotIn, needle, haystack) if is_doc(haystack) => {
            names.push(literal(needle)?);
            Some(())
        }
        Expr::List(items) => items.iter().try_for_each(|e| expr_reads(e, names)),
        Expr::Index(a, b) | Expr::And(a, b) | Expr::Or(a, b) | Expr::Cmp(_, a, b) => {
            expr_reads(a, names)?;
            expr_reads(b, names)
        }
        Expr::Call(obj, _, args) => {
            expr_reads(obj, names)?;
            args.iter().try_for_each(|a| expr_reads(a, names))
        }
        Expr::Not(e) | Expr::IsNone(e, _) => expr_reads(e, names),
    }
}
