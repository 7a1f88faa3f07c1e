//! A small arithmetic expression language for numbers in problem specs.
//!
//! Spec fields that may depend on a sweep variable (`"0.9 * f_main"`, `"100 * 9^(d-1)"`) or on
//! the input (`sigma = "0.1 + x^2"`) are written as expressions. The grammar is
//!
//! ```text
//! expr  := term (('+' | '-') term)*
//! term  := unary (('*' | '/') unary)*
//! unary := '-' unary | power
//! power := atom ('^' unary)?            (right associative)
//! atom  := number | name | name '(' expr ')' | '(' expr ')'
//! ```
//!
//! Functions: `sin cos tan exp ln log10 sqrt abs`. Constants: `pi`, `e`. Every other name is a
//! variable whose value the caller supplies; an unknown name is an error that lists the known
//! ones.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::AnchorError;

/// A parsed expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    source: String,
    node: Node,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Num(f64),
    Var(String),
    Neg(Box<Node>),
    Bin(Op, Box<Node>, Box<Node>),
    Call(Func, Box<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Func {
    Sin,
    Cos,
    Tan,
    Exp,
    Ln,
    Log10,
    Sqrt,
    Abs,
}

impl Func {
    fn from_name(name: &str) -> Option<Func> {
        Some(match name {
            "sin" => Func::Sin,
            "cos" => Func::Cos,
            "tan" => Func::Tan,
            "exp" => Func::Exp,
            "ln" => Func::Ln,
            "log10" => Func::Log10,
            "sqrt" => Func::Sqrt,
            "abs" => Func::Abs,
            _ => return None,
        })
    }

    fn apply(self, v: f64) -> f64 {
        match self {
            Func::Sin => v.sin(),
            Func::Cos => v.cos(),
            Func::Tan => v.tan(),
            Func::Exp => v.exp(),
            Func::Ln => v.ln(),
            Func::Log10 => v.log10(),
            Func::Sqrt => v.sqrt(),
            Func::Abs => v.abs(),
        }
    }
}

impl Expr {
    /// Parses `source`; errors name the position and what was expected there.
    pub fn parse(source: &str) -> Result<Expr, AnchorError> {
        let tokens = tokenize(source)?;
        let mut parser = Parser {
            source,
            tokens,
            pos: 0,
        };
        let node = parser.expr()?;
        if parser.pos < parser.tokens.len() {
            return Err(parser.error("an operator or the end of the expression"));
        }
        Ok(Expr {
            source: source.to_string(),
            node,
        })
    }

    /// The text the expression was parsed from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Names of the variables the expression reads (constants and functions excluded).
    pub fn variables(&self) -> Vec<String> {
        fn walk(node: &Node, out: &mut Vec<String>) {
            match node {
                Node::Num(_) => {}
                Node::Var(v) => {
                    if !out.contains(v) {
                        out.push(v.clone());
                    }
                }
                Node::Neg(a) | Node::Call(_, a) => walk(a, out),
                Node::Bin(_, a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.node, &mut out);
        out
    }

    /// Evaluates with `lookup` giving variable values; `known` lists the names `lookup`
    /// understands, for the error message when a name is missing.
    pub fn eval(
        &self,
        lookup: &dyn Fn(&str) -> Option<f64>,
        known: &dyn Fn() -> Vec<String>,
    ) -> Result<f64, AnchorError> {
        self.eval_node(&self.node, lookup, known)
    }

    fn eval_node(
        &self,
        node: &Node,
        lookup: &dyn Fn(&str) -> Option<f64>,
        known: &dyn Fn() -> Vec<String>,
    ) -> Result<f64, AnchorError> {
        Ok(match node {
            Node::Num(v) => *v,
            Node::Var(name) => match lookup(name) {
                Some(v) => v,
                None => {
                    let mut names = known();
                    names.extend(["pi".to_string(), "e".to_string()]);
                    return Err(AnchorError::Expression {
                        expr: self.source.clone(),
                        message: format!("unknown name `{name}`; known here: {}", names.join(", ")),
                    });
                }
            },
            Node::Neg(a) => -self.eval_node(a, lookup, known)?,
            Node::Call(f, a) => f.apply(self.eval_node(a, lookup, known)?),
            Node::Bin(op, a, b) => {
                let a = self.eval_node(a, lookup, known)?;
                let b = self.eval_node(b, lookup, known)?;
                match op {
                    Op::Add => a + b,
                    Op::Sub => a - b,
                    Op::Mul => a * b,
                    Op::Div => a / b,
                    Op::Pow => pow(a, b),
                }
            }
        })
    }
}

/// `a^b`, exact for small integer exponents (repeated multiplication), `powf` otherwise.
fn pow(a: f64, b: f64) -> f64 {
    if b.fract() == 0.0 && b.abs() <= 64.0 {
        a.powi(b as i32)
    } else {
        a.powf(b)
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Num(f64),
    Name(String),
    Sym(char),
}

fn tokenize(source: &str) -> Result<Vec<(usize, Token)>, AnchorError> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            // Scientific notation: 1e-3, 2.5E4.
            if i < chars.len() && (chars[i] == 'e' || chars[i] == 'E') {
                let mut j = i + 1;
                if j < chars.len() && (chars[j] == '+' || chars[j] == '-') {
                    j += 1;
                }
                if j < chars.len() && chars[j].is_ascii_digit() {
                    while j < chars.len() && chars[j].is_ascii_digit() {
                        j += 1;
                    }
                    i = j;
                }
            }
            let text: String = chars[start..i].iter().collect();
            let value: f64 = text.parse().map_err(|_| AnchorError::Expression {
                expr: source.to_string(),
                message: format!("`{text}` at position {start} is not a number"),
            })?;
            out.push((start, Token::Num(value)));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((start, Token::Name(chars[start..i].iter().collect())));
        } else if "+-*/^()".contains(c) {
            out.push((i, Token::Sym(c)));
            i += 1;
        } else {
            return Err(AnchorError::Expression {
                expr: source.to_string(),
                message: format!(
                    "unexpected character `{c}` at position {i}; valid: numbers, names, + - * / ^ ( )"
                ),
            });
        }
    }
    Ok(out)
}

struct Parser<'a> {
    source: &'a str,
    tokens: Vec<(usize, Token)>,
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, expected: &str) -> AnchorError {
        let found = match self.tokens.get(self.pos) {
            Some((at, Token::Num(v))) => format!("number {v} at position {at}"),
            Some((at, Token::Name(n))) => format!("`{n}` at position {at}"),
            Some((at, Token::Sym(c))) => format!("`{c}` at position {at}"),
            None => "the end of the expression".to_string(),
        };
        AnchorError::Expression {
            expr: self.source.to_string(),
            message: format!("expected {expected}, found {found}"),
        }
    }

    fn peek_sym(&self) -> Option<char> {
        match self.tokens.get(self.pos) {
            Some((_, Token::Sym(c))) => Some(*c),
            _ => None,
        }
    }

    fn expr(&mut self) -> Result<Node, AnchorError> {
        let mut left = self.term()?;
        while let Some(c @ ('+' | '-')) = self.peek_sym() {
            self.pos += 1;
            let right = self.term()?;
            let op = if c == '+' { Op::Add } else { Op::Sub };
            left = Node::Bin(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn term(&mut self) -> Result<Node, AnchorError> {
        let mut left = self.unary()?;
        while let Some(c @ ('*' | '/')) = self.peek_sym() {
            self.pos += 1;
            let right = self.unary()?;
            let op = if c == '*' { Op::Mul } else { Op::Div };
            left = Node::Bin(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Node, AnchorError> {
        if self.peek_sym() == Some('-') {
            self.pos += 1;
            return Ok(Node::Neg(Box::new(self.unary()?)));
        }
        if self.peek_sym() == Some('+') {
            self.pos += 1;
            return self.unary();
        }
        self.power()
    }

    fn power(&mut self) -> Result<Node, AnchorError> {
        let base = self.atom()?;
        if self.peek_sym() == Some('^') {
            self.pos += 1;
            let exponent = self.unary()?;
            return Ok(Node::Bin(Op::Pow, Box::new(base), Box::new(exponent)));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Node, AnchorError> {
        let Some((_, token)) = self.tokens.get(self.pos).cloned() else {
            return Err(self.error("a number, a name or `(`"));
        };
        match token {
            Token::Num(v) => {
                self.pos += 1;
                Ok(Node::Num(v))
            }
            Token::Name(name) => {
                self.pos += 1;
                if self.peek_sym() == Some('(') {
                    let Some(func) = Func::from_name(&name) else {
                        self.pos -= 1;
                        return Err(self.error(
                            "a known function (sin cos tan exp ln log10 sqrt abs) before `(`",
                        ));
                    };
                    self.pos += 1;
                    let arg = self.expr()?;
                    if self.peek_sym() != Some(')') {
                        return Err(self.error("`)`"));
                    }
                    self.pos += 1;
                    return Ok(Node::Call(func, Box::new(arg)));
                }
                Ok(match name.as_str() {
                    "pi" => Node::Num(std::f64::consts::PI),
                    "e" => Node::Num(std::f64::consts::E),
                    _ => Node::Var(name),
                })
            }
            Token::Sym('(') => {
                self.pos += 1;
                let inner = self.expr()?;
                if self.peek_sym() != Some(')') {
                    return Err(self.error("`)`"));
                }
                self.pos += 1;
                Ok(inner)
            }
            Token::Sym(_) => Err(self.error("a number, a name or `(`")),
        }
    }
}

/// A number in a spec: a literal, or an expression string evaluated against the setting's
/// variables (and, for noise, the input coordinates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "a number or an expression string such as \"0.9 * f_main\""
)]
pub enum Num {
    /// A literal number.
    Value(f64),
    /// An expression to evaluate.
    Expr(String),
}

impl From<f64> for Num {
    fn from(v: f64) -> Self {
        Num::Value(v)
    }
}

impl Num {
    /// Parses (when an expression) into an [`Expr`].
    pub fn to_expr(&self) -> Result<Expr, AnchorError> {
        match self {
            Num::Value(v) => Ok(Expr {
                source: format!("{v}"),
                node: Node::Num(*v),
            }),
            Num::Expr(s) => Expr::parse(s),
        }
    }

    /// Evaluates against `vars` (name → value pairs).
    pub fn eval(&self, vars: &[(String, f64)]) -> Result<f64, AnchorError> {
        match self {
            Num::Value(v) => Ok(*v),
            Num::Expr(s) => {
                let expr = Expr::parse(s)?;
                expr.eval(
                    &|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| *v),
                    &|| vars.iter().map(|(k, _)| k.clone()).collect(),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(s: &str, vars: &[(&str, f64)]) -> Result<f64, AnchorError> {
        let vars: Vec<(String, f64)> = vars.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        Num::Expr(s.to_string()).eval(&vars)
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(eval("1 + 2 * 3", &[]).unwrap(), 7.0);
        assert_eq!(eval("(1 + 2) * 3", &[]).unwrap(), 9.0);
        assert_eq!(eval("2 ^ 3 ^ 2", &[]).unwrap(), 512.0); // right associative: 2^(3^2)
        assert_eq!(eval("-2 ^ 2", &[]).unwrap(), -4.0); // unary minus binds looser than ^
        assert_eq!(eval("8 / 4 / 2", &[]).unwrap(), 1.0); // left associative
        assert_eq!(eval("1e-3 * 2E3", &[]).unwrap(), 2.0);
    }

    #[test]
    fn variables_functions_constants() {
        assert_eq!(eval("100 * 9^(d-1)", &[("d", 3.0)]).unwrap(), 8100.0);
        assert!((eval("2 * pi", &[]).unwrap() - std::f64::consts::TAU).abs() < 1e-15);
        assert!((eval("0.1 + x^2", &[("x", 0.5)]).unwrap() - 0.35).abs() < 1e-15);
        assert!((eval("sqrt(abs(-16)) + ln(e)", &[]).unwrap() - 5.0).abs() < 1e-15);
    }

    #[test]
    fn errors_name_the_problem() {
        let err = eval("2 * f_mian", &[("f_main", 1.0)])
            .unwrap_err()
            .to_string();
        assert!(err.contains("f_mian") && err.contains("f_main"), "{err}");
        let err = eval("2 * (3 + 1", &[]).unwrap_err().to_string();
        assert!(err.contains("`)`"), "{err}");
        let err = eval("foo(2)", &[]).unwrap_err().to_string();
        assert!(err.contains("known function"), "{err}");
        let err = eval("2 $ 3", &[]).unwrap_err().to_string();
        assert!(err.contains('$'), "{err}");
        let err = eval("", &[]).unwrap_err().to_string();
        assert!(err.contains("end of the expression"), "{err}");
    }
}
