//! The subset's grammar: one `function (doc) { ... }` whose body declares variables
//! (`var`, `let`, `const`), assigns them, branches with `if`/`else`, returns, and calls
//! `emit`; whose expressions read the document and variables, build arrays and objects,
//! compare, add, negate, branch (`?:`, `&&`, `||`), ask `typeof`, and call `split`,
//! `toLowerCase` or `toUpperCase`. Every name is resolved here: a name that would reach the
//! global object (or one of JavaScript's rules the evaluator does not model, such as a
//! `let` read before its declaration) refuses the source.

use crate::lex::{Tok, Token};
use std::collections::HashMap;

#[derive(Debug, Clone)]
pub(crate) enum Lit {
    Undefined,
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Eq,
    Ne,
    StrictEq,
    StrictNe,
    Lt,
    Gt,
    Le,
    Ge,
    Add,
    Sub,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Split,
    Lower,
    Upper,
}

#[derive(Debug, Clone)]
pub(crate) enum Expr {
    Lit(Lit),
    /// The function's parameter: the document.
    Doc,
    Var(usize),
    /// `a.b`
    Get(Box<Expr>, String),
    /// `a[b]`
    Index(Box<Expr>, Box<Expr>),
    Array(Vec<Expr>),
    /// Keys are never array indexes (JavaScript would move them first).
    Object(Vec<(String, Expr)>),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Plus(Box<Expr>),
    TypeOf(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Cond(Box<Expr>, Box<Expr>, Box<Expr>),
    Emit(Vec<Expr>),
    Call(Box<Expr>, Method, Vec<Expr>),
    Assign(usize, Box<Expr>),
}

#[derive(Debug, Clone)]
pub(crate) enum Stmt {
    Expr(Expr),
    If(Expr, Box<Stmt>, Option<Box<Stmt>>),
    Block(Vec<Stmt>),
    Return(Option<Expr>),
    /// `var x = e`, `let x = e`, `let x` (which sets undefined) or `const x = e`; `var x`
    /// alone does nothing at run time and is not kept.
    Init(usize, Option<Expr>),
}

/// A parsed map function: its body and how many variables it has.
#[derive(Debug, Clone)]
pub(crate) struct Function {
    pub(crate) body: Vec<Stmt>,
    pub(crate) vars: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Var,
    Let,
    Const,
}

#[derive(Debug)]
struct Decl {
    kind: Kind,
    block: usize,
    /// The token position from which a `let`/`const` binding is initialised.
    ready: usize,
}

#[derive(Debug)]
struct Ref {
    slot: usize,
    blocks: Vec<usize>,
    pos: usize,
    write: bool,
}

/// Words that cannot name a variable here: JavaScript's reserved words, and the globals
/// the subset reads (`undefined`, `NaN`, `Infinity`) or calls (`emit`), which a binding
/// would shadow.
const RESERVED: &[&str] = &[
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "export",
    "extends",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "new",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "let",
    "static",
    "enum",
    "await",
    "implements",
    "package",
    "protected",
    "interface",
    "private",
    "public",
    "null",
    "true",
    "false",
    "arguments",
    "eval",
    "async",
    "of",
    "undefined",
    "NaN",
    "Infinity",
    "emit",
];

fn bindable(name: &str) -> bool {
    !RESERVED.contains(&name)
}

pub(crate) fn parse(tokens: &[Token]) -> Option<Function> {
    let mut p = Parser {
        toks: tokens,
        pos: 0,
        param: String::new(),
        names: HashMap::new(),
        decls: Vec::new(),
        refs: Vec::new(),
        blocks: vec![0],
        next_block: 1,
    };
    p.word("function")?;
    if let Some(Tok::Ident(name)) = p.peek() {
        if !bindable(name) {
            return None;
        }
        p.pos += 1;
    }
    p.punct("(")?;
    let Some(Tok::Ident(param)) = p.next() else {
        return None;
    };
    if !bindable(param) {
        return None;
    }
    p.param = param.clone();
    p.punct(")")?;
    p.punct("{")?;
    let body = p.statements()?;
    p.punct("}")?;
    while p.eat_punct(";") {}
    if p.peek().is_some() {
        return None;
    }
    p.resolve()?;
    Some(Function {
        body,
        vars: p.decls.len(),
    })
}

struct Parser<'t> {
    toks: &'t [Token],
    pos: usize,
    param: String,
    names: HashMap<String, usize>,
    /// By slot; `None` until the name's declaration is seen.
    decls: Vec<Option<Decl>>,
    refs: Vec<Ref>,
    /// The blocks the parser is in, innermost last (0 is the function body).
    blocks: Vec<usize>,
    next_block: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn next(&mut self) -> Option<&Tok> {
        let t = self.toks.get(self.pos).map(|t| &t.tok);
        self.pos += 1;
        t
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        let yes = self.is_punct(p);
        if yes {
            self.pos += 1;
        }
        yes
    }

    fn punct(&mut self, p: &str) -> Option<()> {
        self.eat_punct(p).then_some(())
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(x)) if x == w)
    }

    fn word(&mut self, w: &str) -> Option<()> {
        let yes = self.is_word(w);
        if yes {
            self.pos += 1;
        }
        yes.then_some(())
    }

    fn newline_before(&self) -> bool {
        self.toks.get(self.pos).is_some_and(|t| t.newline_before)
    }

    /// The end of a statement: `;`, or where automatic semicolon insertion puts one (before
    /// `}`, at the end, or before a token on a new line).
    fn end_statement(&mut self) -> Option<()> {
        if self.eat_punct(";")
            || self.is_punct("}")
            || self.peek().is_none()
            || self.newline_before()
        {
            return Some(());
        }
        None
    }

    fn statements(&mut self) -> Option<Vec<Stmt>> {
        let mut out = Vec::new();
        while !self.is_punct("}") {
            self.peek()?;
            if let Some(s) = self.statement(false)? {
                out.push(s);
            }
        }
        Some(out)
    }

    /// One statement; `Some(None)` for one that does nothing. `lone`: the body of an `if`
    /// or `else` without braces, where `let` and `const` may not stand.
    fn statement(&mut self, lone: bool) -> Option<Option<Stmt>> {
        if self.eat_punct(";") {
            return Some(None);
        }
        if self.eat_punct("{") {
            let id = self.next_block;
            self.next_block += 1;
            self.blocks.push(id);
            let body = self.statements()?;
            self.blocks.pop();
            self.punct("}")?;
            return Some(Some(Stmt::Block(body)));
        }
        if self.word("if").is_some() {
            self.punct("(")?;
            let cond = self.expression()?;
            self.punct(")")?;
            let then = self.statement(true)?.unwrap_or(Stmt::Block(Vec::new()));
            let otherwise = if self.word("else").is_some() {
                Some(Box::new(
                    self.statement(true)?.unwrap_or(Stmt::Block(Vec::new())),
                ))
            } else {
                None
            };
            return Some(Some(Stmt::If(cond, Box::new(then), otherwise)));
        }
        if self.word("return").is_some() {
            let value = if self.is_punct(";") || self.is_punct("}") || self.newline_before() {
                None
            } else {
                Some(self.expression()?)
            };
            self.end_statement()?;
            return Some(Some(Stmt::Return(value)));
        }
        let kind = match self.peek() {
            Some(Tok::Ident(w)) if w == "var" => Some(Kind::Var),
            Some(Tok::Ident(w)) if w == "const" => Some(Kind::Const),
            // `let` is a declaration only before a name (`let [a] = …` destructures).
            Some(Tok::Ident(w)) if w == "let" => {
                match self.toks.get(self.pos + 1).map(|t| &t.tok) {
                    Some(Tok::Ident(_)) => Some(Kind::Let),
                    _ => return None,
                }
            }
            _ => None,
        };
        if let Some(kind) = kind {
            if lone && kind != Kind::Var {
                return None;
            }
            self.pos += 1;
            let stmts = self.declarations(kind)?;
            self.end_statement()?;
            return Some(Some(if stmts.len() == 1 {
                stmts.into_iter().next().expect("one")
            } else {
                Stmt::Block(stmts)
            }));
        }
        // Statements that start with these are not expressions (or not in the subset).
        if let Some(Tok::Ident(w)) = self.peek() {
            if matches!(
                w.as_str(),
                "function"
                    | "for"
                    | "while"
                    | "do"
                    | "switch"
                    | "try"
                    | "throw"
                    | "class"
                    | "with"
                    | "break"
                    | "continue"
                    | "debugger"
                    | "import"
                    | "export"
                    | "async"
            ) {
                return None;
            }
        }
        let e = self.expression()?;
        self.end_statement()?;
        Some(Some(Stmt::Expr(e)))
    }

    fn declarations(&mut self, kind: Kind) -> Option<Vec<Stmt>> {
        let mut out = Vec::new();
        loop {
            let Some(Tok::Ident(name)) = self.next() else {
                return None;
            };
            let name = name.clone();
            if !bindable(&name) || name == self.param {
                return None;
            }
            let slot = self.slot(&name);
            let init = if self.eat_punct("=") {
                Some(self.assignment()?)
            } else if kind == Kind::Const {
                return None;
            } else {
                None
            };
            // One declaration per name: redeclaring is legal only for `var`, and refusing
            // it keeps every name's meaning plain.
            if self.decls[slot].is_some() {
                return None;
            }
            self.decls[slot] = Some(Decl {
                kind,
                block: *self.blocks.last().expect("in the body"),
                ready: self.pos,
            });
            match (kind, init) {
                (Kind::Var, None) => {}
                (_, init) => out.push(Stmt::Init(slot, init)),
            }
            if !self.eat_punct(",") {
                return Some(out);
            }
        }
    }

    fn slot(&mut self, name: &str) -> usize {
        if let Some(s) = self.names.get(name) {
            return *s;
        }
        let s = self.decls.len();
        self.decls.push(None);
        self.names.insert(name.to_owned(), s);
        s
    }

    /// Every name used is declared, and `let`/`const` ones are used only inside their
    /// block, after their declaration, and `const` ones never assigned.
    fn resolve(&self) -> Option<()> {
        for r in &self.refs {
            let d = self.decls[r.slot].as_ref()?;
            match d.kind {
                Kind::Var => {}
                Kind::Let | Kind::Const => {
                    if !r.blocks.contains(&d.block) || r.pos <= d.ready {
                        return None;
                    }
                    if r.write && d.kind == Kind::Const {
                        return None;
                    }
                }
            }
        }
        self.decls.iter().all(Option::is_some).then_some(())
    }

    fn expression(&mut self) -> Option<Expr> {
        let e = self.assignment()?;
        // The comma operator is not in the subset.
        if self.is_punct(",") {
            return None;
        }
        Some(e)
    }

    fn assignment(&mut self) -> Option<Expr> {
        let refs_before = self.refs.len();
        let target = self.conditional()?;
        if !self.eat_punct("=") {
            return Some(target);
        }
        let Expr::Var(slot) = target else {
            return None;
        };
        // The target is the one name just read; it is written, not read.
        if self.refs.len() != refs_before + 1 {
            return None;
        }
        self.refs.last_mut().expect("the target").write = true;
        let value = self.assignment()?;
        Some(Expr::Assign(slot, Box::new(value)))
    }

    fn conditional(&mut self) -> Option<Expr> {
        let cond = self.or()?;
        if !self.eat_punct("?") {
            return Some(cond);
        }
        let then = self.assignment()?;
        self.punct(":")?;
        let otherwise = self.assignment()?;
        Some(Expr::Cond(
            Box::new(cond),
            Box::new(then),
            Box::new(otherwise),
        ))
    }

    fn or(&mut self) -> Option<Expr> {
        let mut e = self.and()?;
        while self.eat_punct("||") {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Some(e)
    }

    fn and(&mut self) -> Option<Expr> {
        let mut e = self.equality()?;
        while self.eat_punct("&&") {
            e = Expr::And(Box::new(e), Box::new(self.equality()?));
        }
        Some(e)
    }

    fn binary(
        &mut self,
        ops: &[(&str, BinOp)],
        next: fn(&mut Self) -> Option<Expr>,
    ) -> Option<Expr> {
        let mut e = next(self)?;
        'more: loop {
            for (p, op) in ops {
                if self.eat_punct(p) {
                    e = Expr::Bin(*op, Box::new(e), Box::new(next(self)?));
                    continue 'more;
                }
            }
            return Some(e);
        }
    }

    fn equality(&mut self) -> Option<Expr> {
        use BinOp::*;
        self.binary(
            &[("===", StrictEq), ("!==", StrictNe), ("==", Eq), ("!=", Ne)],
            Self::relational,
        )
    }

    fn relational(&mut self) -> Option<Expr> {
        use BinOp::*;
        self.binary(
            &[("<=", Le), (">=", Ge), ("<", Lt), (">", Gt)],
            Self::additive,
        )
    }

    fn additive(&mut self) -> Option<Expr> {
        self.binary(&[("+", BinOp::Add), ("-", BinOp::Sub)], Self::unary)
    }

    fn unary(&mut self) -> Option<Expr> {
        if self.eat_punct("!") {
            return Some(Expr::Not(Box::new(self.unary()?)));
        }
        if self.eat_punct("-") {
            return Some(Expr::Neg(Box::new(self.unary()?)));
        }
        if self.eat_punct("+") {
            return Some(Expr::Plus(Box::new(self.unary()?)));
        }
        if self.word("typeof").is_some() {
            return Some(Expr::TypeOf(Box::new(self.unary()?)));
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Option<Expr> {
        let mut e = self.primary()?;
        loop {
            if self.eat_punct(".") {
                let Some(Tok::Ident(name)) = self.next() else {
                    return None;
                };
                let name = name.clone();
                if self.is_punct("(") {
                    let method = match name.as_str() {
                        "split" => Method::Split,
                        "toLowerCase" => Method::Lower,
                        "toUpperCase" => Method::Upper,
                        _ => return None,
                    };
                    let args = self.arguments()?;
                    let arity = if method == Method::Split { 1 } else { 0 };
                    if args.len() != arity {
                        return None;
                    }
                    e = Expr::Call(Box::new(e), method, args);
                } else {
                    e = Expr::Get(Box::new(e), name);
                }
            } else if self.eat_punct("[") {
                let index = self.expression()?;
                self.punct("]")?;
                e = Expr::Index(Box::new(e), Box::new(index));
            } else if self.is_punct("(") {
                // Calls of anything else (a member read, a variable) are not in the subset.
                return None;
            } else {
                return Some(e);
            }
        }
    }

    fn arguments(&mut self) -> Option<Vec<Expr>> {
        self.punct("(")?;
        let mut args = Vec::new();
        if self.eat_punct(")") {
            return Some(args);
        }
        loop {
            args.push(self.assignment()?);
            if self.eat_punct(")") {
                return Some(args);
            }
            self.punct(",")?;
        }
    }

    fn primary(&mut self) -> Option<Expr> {
        let tok = self.next()?.clone();
        Some(match tok {
            Tok::Num(n) => Expr::Lit(Lit::Num(n)),
            Tok::Str(s) => Expr::Lit(Lit::Str(s)),
            Tok::Punct("(") => {
                let e = self.expression()?;
                self.punct(")")?;
                e
            }
            Tok::Punct("[") => {
                let mut items = Vec::new();
                if !self.eat_punct("]") {
                    loop {
                        items.push(self.assignment()?);
                        if self.eat_punct("]") {
                            break;
                        }
                        self.punct(",")?;
                    }
                }
                Expr::Array(items)
            }
            Tok::Punct("{") => self.object()?,
            Tok::Ident(w) => match w.as_str() {
                "true" => Expr::Lit(Lit::Bool(true)),
                "false" => Expr::Lit(Lit::Bool(false)),
                "null" => Expr::Lit(Lit::Null),
                "undefined" => Expr::Lit(Lit::Undefined),
                "NaN" => Expr::Lit(Lit::Num(f64::NAN)),
                "Infinity" => Expr::Lit(Lit::Num(f64::INFINITY)),
                "emit" if self.is_punct("(") => {
                    let args = self.arguments()?;
                    if args.is_empty() || args.len() > 2 {
                        return None;
                    }
                    Expr::Emit(args)
                }
                name if name == self.param => Expr::Doc,
                name if bindable(name) => {
                    let slot = self.slot(name);
                    self.refs.push(Ref {
                        slot,
                        blocks: self.blocks.clone(),
                        pos: self.pos,
                        write: false,
                    });
                    Expr::Var(slot)
                }
                _ => return None,
            },
            Tok::Punct(_) => return None,
        })
    }

    /// `{ name: value, "name": value }`; other member forms are not in the subset.
    fn object(&mut self) -> Option<Expr> {
        let mut members: Vec<(String, Expr)> = Vec::new();
        if self.eat_punct("}") {
            return Some(Expr::Object(members));
        }
        loop {
            let key = match self.next()? {
                Tok::Ident(k) | Tok::Str(k) => k.clone(),
                _ => return None,
            };
            // `__proto__: x` sets the prototype; index keys would be reordered.
            if key == "__proto__" || crate::number::is_array_index(&key) {
                return None;
            }
            self.punct(":")?;
            let value = self.assignment()?;
            members.push((key, value));
            if self.eat_punct("}") {
                return Some(Expr::Object(members));
            }
            self.punct(",")?;
        }
    }
}

/// The document's top-level members `f` reads (`doc.a`, `doc["a"]`, `doc[0]`), or `None`
/// when it uses the document otherwise (emits it, tests it, indexes it by a computed key).
pub(crate) fn doc_reads(f: &Function) -> Option<Vec<String>> {
    let mut names = Vec::new();
    f.body.iter().try_for_each(|s| stmt_reads(s, &mut names))?;
    names.sort();
    names.dedup();
    Some(names)
}

fn stmt_reads(s: &Stmt, names: &mut Vec<String>) -> Option<()> {
    match s {
        Stmt::Expr(e) | Stmt::Return(Some(e)) | Stmt::Init(_, Some(e)) => expr_reads(e, names),
        Stmt::Return(None) | Stmt::Init(_, None) => Some(()),
        Stmt::If(c, a, b) => {
            expr_reads(c, names)?;
            stmt_reads(a, names)?;
            b.as_deref().map_or(Some(()), |b| stmt_reads(b, names))
        }
        Stmt::Block(body) => body.iter().try_for_each(|s| stmt_reads(s, names)),
    }
}

fn expr_reads(e: &Expr, names: &mut Vec<String>) -> Option<()> {
    let all =
        |es: &[Expr], names: &mut Vec<String>| es.iter().try_for_each(|e| expr_reads(e, names));
    match e {
        Expr::Doc => None,
        Expr::Get(obj, name) if matches!(**obj, Expr::Doc) => {
            names.push(name.clone());
            Some(())
        }
        Expr::Index(obj, key) if matches!(**obj, Expr::Doc) => match &**key {
            Expr::Lit(Lit::Str(name)) => {
                names.push(name.clone());
                Some(())
            }
            Expr::Lit(Lit::Num(n)) if *n >= 0.0 && n.fract() == 0.0 && *n < u32::MAX as f64 => {
                names.push((*n as u32).to_string());
                Some(())
            }
            _ => None,
        },
        Expr::Lit(_) | Expr::Var(_) => Some(()),
        Expr::Get(x, _)
        | Expr::Not(x)
        | Expr::Neg(x)
        | Expr::Plus(x)
        | Expr::TypeOf(x)
        | Expr::Assign(_, x) => expr_reads(x, names),
        Expr::Index(a, b) | Expr::Bin(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
            expr_reads(a, names)?;
            expr_reads(b, names)
        }
        Expr::Cond(a, b, c) => {
            expr_reads(a, names)?;
            expr_reads(b, names)?;
            expr_reads(c, names)
        }
        Expr::Array(items) | Expr::Emit(items) => all(items, names),
        Expr::Object(members) => members.iter().try_for_each(|(_, e)| expr_reads(e, names)),
        Expr::Call(recv, _, args) => {
            expr_reads(recv, names)?;
            all(args, names)
        }
    }
}
