#include "cel_eval.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum tk { T_END, T_INT, T_STR, T_IDENT, T_OP };
struct tok {
    enum tk t;
    char text[128];
    long long ival;
};

enum kind { K_ERR, K_NULL, K_BOOL, K_INT, K_DBL, K_STR, K_LIST, K_MAP, K_TYPE };
struct cv {
    enum kind k;
    long long i;
    double d;
    const char *s;
    const cJSON *j;
};

#define MAX_TOKS 1024

struct parser {
    struct tok *t;
    int n, pos;
    cJSON *arena;          /* owns strings and lists the evaluation creates */
    const cJSON *self;
    const char *var;       /* the variable a .map() binds, or NULL */
    struct cv var_value;
    char err[256];
    int syntax_error;
};

static struct cv mk(enum kind k) { struct cv v = {0}; v.k = k; return v; }
static struct cv mk_bool(int b) { struct cv v = mk(K_BOOL); v.i = !!b; return v; }
static struct cv mk_int(long long i) { struct cv v = mk(K_INT); v.i = i; return v; }
static struct cv mk_type(const char *n) { struct cv v = mk(K_TYPE); v.s = n; return v; }

static struct cv fail(struct parser *p, const char *msg, const char *arg)
{
    if (!p->err[0])
        snprintf(p->err, sizeof p->err, "%s%s%s", msg, arg ? " " : "", arg ? arg : "");
    return mk(K_ERR);
}

static struct cv syntax(struct parser *p, const char *msg)
{
    p->syntax_error = 1;
    return fail(p, "syntax:", msg);
}

static struct cv from_json(const cJSON *j)
{
    struct cv v = mk(K_NULL);
    if (cJSON_IsObject(j)) { v.k = K_MAP; v.j = j; }
    else if (cJSON_IsArray(j)) { v.k = K_LIST; v.j = j; }
    else if (cJSON_IsString(j)) { v.k = K_STR; v.s = j->valuestring; }
    else if (cJSON_IsBool(j)) v = mk_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9.2e18) v = mk_int((long long)d);
        else { v.k = K_DBL; v.d = d; }
    }
    return v;
}

/* ---------------------------------------------------------------- lexer */

static int lex(const char *s, struct tok *t, int max)
{
    int n = 0;
    while (*s) {
        if (isspace((unsigned char)*s)) { s++; continue; }
        if (n >= max - 1)
            return -1;
        struct tok *k = &t[n++];
        memset(k, 0, sizeof *k);
        if (isdigit((unsigned char)*s)) {
            k->t = T_INT;
            k->ival = strtoll(s, (char **)&s, 10);
        } else if (isalpha((unsigned char)*s) || *s == '_') {
            k->t = T_IDENT;
            size_t l = 0;
            while ((isalnum((unsigned char)s[l]) || s[l] == '_') && l < sizeof k->text - 1) l++;
            memcpy(k->text, s, l);
            s += l;
        } else if (*s == '\'' || *s == '"') {
            char q = *s++;
            k->t = T_STR;
            size_t l = 0;
            while (*s && *s != q && l < sizeof k->text - 1) k->text[l++] = *s++;
            if (*s != q)
                return -1;
            s++;
        } else {
            static const char *const two[] = {"||", "&&", "==", "!=", "<=", ">=", NULL};
            k->t = T_OP;
            int found = 0;
            for (const char *const *o = two; *o; o++)
                if (!strncmp(s, *o, 2)) {
                    memcpy(k->text, s, 2);
                    s += 2;
                    found = 1;
                    break;
                }
            if (!found) {
                if (!strchr("!?:.,()[]{}*/%+-<>", *s))
                    return -1;
                k->text[0] = *s++;
            }
        }
    }
    t[n].t = T_END;
    return n;
}

static int is_op(struct parser *p, const char *op)
{
    return p->t[p->pos].t == T_OP && !strcmp(p->t[p->pos].text, op);
}

static int accept(struct parser *p, const char *op)
{
    if (is_op(p, op)) { p->pos++; return 1; }
    return 0;
}

/* ---------------------------------------------------------------- evaluation */

static struct cv expr(struct parser *p, int live);

static int truthy(struct cv v) { return v.k == K_BOOL && v.i; }

static const char *type_name(struct cv v)
{
    switch (v.k) {
    case K_BOOL: return "bool";
    case K_INT: return "int";
    case K_DBL: return "double";
    case K_STR: return "string";
    case K_LIST: return "list";
    case K_MAP: return "map";
    case K_TYPE: return "type";
    case K_NULL: return "null_type";
    default: return "error";
    }
}

static int num(struct cv v, double *d)
{
    if (v.k == K_INT) { *d = (double)v.i; return 1; }
    if (v.k == K_DBL) { *d = v.d; return 1; }
    return 0;
}

static struct cv equals(struct parser *p, struct cv a, struct cv b)
{
    double x, y;
    if (num(a, &x) && num(b, &y)) return mk_bool(x == y);
    if (a.k != b.k) return mk_bool(0);
    switch (a.k) {
    case K_BOOL: return mk_bool(a.i == b.i);
    case K_STR: case K_TYPE: return mk_bool(!strcmp(a.s, b.s));
    case K_NULL: return mk_bool(1);
    case K_LIST: case K_MAP: return mk_bool(cJSON_Compare(a.j, b.j, 1));
    default: return fail(p, "cannot compare", type_name(a));
    }
}

/* select field `name` of v; presence-only when `has` */
static struct cv select_field(struct parser *p, struct cv v, const char *name, int has)
{
    if (v.k == K_ERR) return v;
    if (v.k != K_MAP) return fail(p, "select on non-map", name);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(v.j, name);
    if (has) return mk_bool(m && !cJSON_IsNull(m));
    if (!m || cJSON_IsNull(m)) return fail(p, "no such key:", name);
    return from_json(m);
}

static struct cv call(struct parser *p, const char *fn, int live);

static struct cv postfix(struct parser *p, struct cv v, int live, int has_mode)
{
    for (;;) {
        if (accept(p, ".")) {
            if (p->t[p->pos].t != T_IDENT) return syntax(p, "field name expected");
            char name[128];
            snprintf(name, sizeof name, "%s", p->t[p->pos++].text);
            if (is_op(p, "(")) { /* method */
                p->pos++;
                if (!strcmp(name, "sum")) {
                    if (!accept(p, ")")) return syntax(p, "sum() takes no arguments");
                    if (!live) continue;
                    if (v.k == K_ERR) return v;
                    if (v.k != K_LIST) return fail(p, "sum on non-list", NULL);
                    long long s = 0;
                    const cJSON *e;
                    cJSON_ArrayForEach(e, v.j) {
                        struct cv x = from_json(e);
                        if (x.k != K_INT) return fail(p, "sum of non-int", NULL);
                        s += x.i;
                    }
                    v = mk_int(s);
                } else if (!strcmp(name, "map")) {
                    if (p->t[p->pos].t != T_IDENT) return syntax(p, "map variable expected");
                    const char *var = p->t[p->pos++].text;
                    if (!accept(p, ",")) return syntax(p, "',' expected");
                    int body = p->pos;
                    const char *saved_var = p->var;
                    struct cv saved_val = p->var_value;
                    cJSON *out = cJSON_CreateArray();
                    if (!out) return fail(p, "out of memory", NULL);
                    cJSON_AddItemToArray(p->arena, out);
                    int n = (live && v.k == K_LIST) ? cJSON_GetArraySize(v.j) : 0;
                    struct cv res = mk(K_NULL);
                    for (int i = 0; i < n; i++) {
                        p->pos = body;
                        p->var = var;
                        p->var_value = from_json(cJSON_GetArrayItem(v.j, i));
                        res = expr(p, 1);
                        if (res.k == K_ERR) break;
                        cJSON *item = res.k == K_INT ? cJSON_CreateNumber((double)res.i)
                                      : res.k == K_BOOL ? cJSON_CreateBool((int)res.i)
                                      : res.k == K_STR ? cJSON_CreateString(res.s) : NULL;
                        if (!item) { res = fail(p, "map result type unsupported", NULL); break; }
                        cJSON_AddItemToArray(out, item);
                    }
                    p->pos = body;
                    p->var = var;
                    expr(p, 0); /* consume the body */
                    p->var = saved_var;
                    p->var_value = saved_val;
                    if (!accept(p, ")")) return syntax(p, "')' expected after map");
                    if (!live) continue;
                    if (v.k == K_ERR) return v;
                    if (v.k != K_LIST) return fail(p, "map on non-list", NULL);
                    if (res.k == K_ERR) return res;
                    v = mk(K_LIST);
                    v.j = out;
                } else {
                    return syntax(p, "unknown method");
                }
                continue;
            }
            if (has_mode && is_op(p, ")"))
                return live ? select_field(p, v, name, 1) : mk(K_NULL);
            if (live) v = select_field(p, v, name, 0);
        } else if (accept(p, "[")) {
            struct cv idx = expr(p, live);
            if (!accept(p, "]")) return syntax(p, "']' expected");
            if (!live) continue;
            if (v.k == K_ERR) return v;
            if (idx.k == K_ERR) return idx;
            if (v.k == K_MAP && idx.k == K_STR) {
                const cJSON *m = cJSON_GetObjectItemCaseSensitive(v.j, idx.s);
                if (!m) return fail(p, "no such key:", idx.s);
                v = from_json(m);
            } else if (v.k == K_LIST && idx.k == K_INT) {
                const cJSON *m = cJSON_GetArrayItem(v.j, (int)idx.i);
                if (!m) return fail(p, "index out of range", NULL);
                v = from_json(m);
            } else {
                return fail(p, "bad index", NULL);
            }
        } else {
            return v;
        }
    }
}

static struct cv primary(struct parser *p, int live, int has_mode)
{
    struct tok *k = &p->t[p->pos];
    struct cv v = mk(K_NULL);
    if (k->t == T_INT) {
        p->pos++;
        v = mk_int(k->ival);
    } else if (k->t == T_STR) {
        p->pos++;
        v = mk(K_STR);
        v.s = k->text; /* tokens live as long as the evaluation */
    } else if (k->t == T_IDENT) {
        p->pos++;
        if (is_op(p, "(") && strcmp(k->text, "self")) {
            p->pos++;
            v = call(p, k->text, live);
        } else if (!strcmp(k->text, "self")) {
            v = from_json(p->self);
        } else if (p->var && !strcmp(k->text, p->var)) {
            v = p->var_value;
        } else if (!strcmp(k->text, "true") || !strcmp(k->text, "false")) {
            v = mk_bool(k->text[0] == 't');
        } else if (!strcmp(k->text, "null")) {
            v = mk(K_NULL);
        } else if (!strcmp(k->text, "int") || !strcmp(k->text, "string") || !strcmp(k->text, "bool") ||
                   !strcmp(k->text, "double") || !strcmp(k->text, "list") || !strcmp(k->text, "map")) {
            v = mk_type(k->text);
        } else {
            return live ? fail(p, "undeclared reference", k->text) : mk(K_NULL);
        }
    } else if (accept(p, "(")) {
        v = expr(p, live);
        if (!accept(p, ")")) return syntax(p, "')' expected");
    } else if (accept(p, "{")) {
        cJSON *m = cJSON_CreateObject();
        if (!m) return fail(p, "out of memory", NULL);
        cJSON_AddItemToArray(p->arena, m);
        while (!is_op(p, "}")) {
            struct cv key = expr(p, live);
            if (!accept(p, ":")) return syntax(p, "':' expected in map literal");
            struct cv val = expr(p, live);
            if (live) {
                if (key.k != K_STR) return fail(p, "map literal keys must be strings here", NULL);
                cJSON *item = val.k == K_INT ? cJSON_CreateNumber((double)val.i)
                              : val.k == K_STR ? cJSON_CreateString(val.s) : NULL;
                if (!item) return fail(p, "map literal value type unsupported", NULL);
                cJSON_AddItemToObject(m, key.s, item);
            }
            if (!accept(p, ",")) break;
        }
        if (!accept(p, "}")) return syntax(p, "'}' expected");
        v = mk(K_MAP);
        v.j = m;
    } else {
        return syntax(p, "unexpected token");
    }
    return postfix(p, v, live, has_mode);
}

static struct cv call(struct parser *p, const char *fn, int live)
{
    if (!strcmp(fn, "has")) {
        struct cv v = primary(p, live, 1);
        if (!accept(p, ")")) return syntax(p, "')' expected after has");
        return v;
    }
    struct cv a = expr(p, live);
    if (!accept(p, ")")) return syntax(p, "')' expected after argument");
    if (!live) return mk(K_NULL);
    if (a.k == K_ERR) return a;
    if (!strcmp(fn, "type")) return mk_type(type_name(a));
    if (!strcmp(fn, "int")) {
        if (a.k == K_INT) return a;
        if (a.k == K_DBL) return mk_int((long long)a.d);
        if (a.k == K_STR) {
            char *end;
            long long x = strtoll(a.s, &end, 10);
            if (*a.s && !*end) return mk_int(x);
        }
        return fail(p, "int() of", type_name(a));
    }
    if (!strcmp(fn, "size")) {
        if (a.k == K_STR) return mk_int((long long)strlen(a.s));
        if (a.k == K_LIST || a.k == K_MAP) return mk_int(cJSON_GetArraySize(a.j));
        return fail(p, "size() of", type_name(a));
    }
    return fail(p, "unknown function", fn);
}

static struct cv unary(struct parser *p, int live)
{
    if (accept(p, "!")) {
        struct cv v = unary(p, live);
        if (!live || v.k == K_ERR) return v;
        if (v.k != K_BOOL) return fail(p, "! of", type_name(v));
        return mk_bool(!v.i);
    }
    if (accept(p, "-")) {
        struct cv v = unary(p, live);
        if (!live || v.k == K_ERR) return v;
        if (v.k == K_INT) return mk_int(-v.i);
        if (v.k == K_DBL) { v.d = -v.d; return v; }
        return fail(p, "- of", type_name(v));
    }
    return primary(p, live, 0);
}

static struct cv arith(struct parser *p, char op, struct cv a, struct cv b)
{
    if (a.k == K_ERR) return a;
    if (b.k == K_ERR) return b;
    if (a.k == K_INT && b.k == K_INT) {
        switch (op) {
        case '+': return mk_int(a.i + b.i);
        case '-': return mk_int(a.i - b.i);
        case '*': return mk_int(a.i * b.i);
        case '/': return b.i ? mk_int(a.i / b.i) : fail(p, "division by zero", NULL);
        case '%': return b.i ? mk_int(a.i % b.i) : fail(p, "modulus by zero", NULL);
        }
    }
    if (a.k == K_DBL && b.k == K_DBL && op != '%') {
        struct cv r = mk(K_DBL);
        r.d = op == '+' ? a.d + b.d : op == '-' ? a.d - b.d : op == '*' ? a.d * b.d : a.d / b.d;
        return r;
    }
    return fail(p, "no matching overload for arithmetic on", type_name(a));
}

static struct cv mul(struct parser *p, int live)
{
    struct cv a = unary(p, live);
    for (;;) {
        char op = is_op(p, "*") ? '*' : is_op(p, "/") ? '/' : is_op(p, "%") ? '%' : 0;
        if (!op) return a;
        p->pos++;
        struct cv b = unary(p, live);
        if (live) a = arith(p, op, a, b);
    }
}

static struct cv add(struct parser *p, int live)
{
    struct cv a = mul(p, live);
    for (;;) {
        char op = is_op(p, "+") ? '+' : is_op(p, "-") ? '-' : 0;
        if (!op) return a;
        p->pos++;
        struct cv b = mul(p, live);
        if (live) a = arith(p, op, a, b);
    }
}

static struct cv rel(struct parser *p, int live)
{
    struct cv a = add(p, live);
    static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">", NULL};
    for (const char *const *o = ops; *o; o++) {
        if (!is_op(p, *o)) continue;
        p->pos++;
        struct cv b = add(p, live);
        if (!live) return mk(K_NULL);
        if (a.k == K_ERR) return a;
        if (b.k == K_ERR) return b;
        if (!strcmp(*o, "==")) return equals(p, a, b);
        if (!strcmp(*o, "!=")) { struct cv e = equals(p, a, b); if (e.k == K_BOOL) e.i = !e.i; return e; }
        double x, y;
        if (!num(a, &x) || !num(b, &y)) return fail(p, "ordering needs numbers, got", type_name(a));
        if (!strcmp(*o, "<=")) return mk_bool(x <= y);
        if (!strcmp(*o, ">=")) return mk_bool(x >= y);
        if (!strcmp(*o, "<")) return mk_bool(x < y);
        return mk_bool(x > y);
    }
    return a;
}

static struct cv and_expr(struct parser *p, int live)
{
    struct cv a = rel(p, live);
    while (accept(p, "&&")) {
        int a_false = live && a.k == K_BOOL && !a.i;
        struct cv b = rel(p, live && !a_false);
        if (!live || a_false) continue;
        if (b.k == K_BOOL && !b.i) { a = b; continue; } /* error && false = false */
        if (a.k == K_ERR) continue;
        if (b.k == K_ERR) { a = b; continue; }
        if (a.k != K_BOOL || b.k != K_BOOL) { a = fail(p, "&& needs bools", NULL); continue; }
        a = mk_bool(a.i && b.i);
    }
    return a;
}

static struct cv or_expr(struct parser *p, int live)
{
    struct cv a = and_expr(p, live);
    while (accept(p, "||")) {
        int a_true = live && truthy(a);
        struct cv b = and_expr(p, live && !a_true);
        if (!live || a_true) continue;
        if (truthy(b)) { a = b; continue; } /* error || true = true */
        if (a.k == K_ERR) continue;
        if (b.k == K_ERR) { a = b; continue; }
        if (a.k != K_BOOL || b.k != K_BOOL) { a = fail(p, "|| needs bools", NULL); continue; }
        a = mk_bool(a.i || b.i);
    }
    return a;
}

static struct cv expr(struct parser *p, int live)
{
    struct cv c = or_expr(p, live);
    if (!accept(p, "?"))
        return c;
    int cond_ok = live && c.k == K_BOOL;
    struct cv a = expr(p, cond_ok && c.i);
    if (!accept(p, ":")) return syntax(p, "':' expected in conditional");
    struct cv b = expr(p, cond_ok && !c.i);
    if (!live) return mk(K_NULL);
    if (c.k == K_ERR) return c;
    if (c.k != K_BOOL) return fail(p, "condition is not a bool", NULL);
    return c.i ? a : b;
}

int cel_eval_bool(const char *rule, const cJSON *self_value, char *err, size_t errlen)
{
    size_t ntok = strlen(rule) + 2; /* at most one token per character, plus the end */
    if (ntok > MAX_TOKS)
        ntok = MAX_TOKS;
    struct tok *toks = calloc(ntok, sizeof *toks);
    cJSON *arena = cJSON_CreateArray();
    int rc = -1;
    if (!toks || !arena) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    int n = lex(rule, toks, (int)ntok);
    if (n < 0) {
        snprintf(err, errlen, "syntax: cannot tokenize");
        goto out;
    }
    struct parser p = {.t = toks, .n = n, .arena = arena, .self = self_value};
    struct cv v = expr(&p, 1);
    if (!p.syntax_error && p.t[p.pos].t != T_END)
        syntax(&p, "trailing tokens");
    if (p.syntax_error || v.k == K_ERR) {
        snprintf(err, errlen, "%s", p.err[0] ? p.err : "error");
    } else if (v.k != K_BOOL) {
        snprintf(err, errlen, "rule is not a bool but %s", type_name(v));
    } else {
        rc = (int)v.i;
    }
out:
    cJSON_Delete(arena);
    free(toks);
    return rc;
}

int cel_check(const cJSON *s, const cJSON *val, const char *path, struct schema_violations *v)
{
    int before = v->count;
    if (!s || !val || cJSON_IsNull(val))
        return 0;
    const cJSON *rules = cJSON_GetObjectItemCaseSensitive(s, "x-kubernetes-validations"), *r;
    cJSON_ArrayForEach(r, rules) {
        const char *rule = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "rule"));
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "message"));
        const char *fp = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "fieldPath"));
        if (!rule)
            continue;
        char err[256] = "";
        int res = cel_eval_bool(rule, val, err, sizeof err);
        if (res == 1)
            continue;
        if (v->count < SCHEMA_MAX_VIOLATIONS) {
            snprintf(v->path[v->count], sizeof v->path[0], "%s%s", path, fp ? fp : "");
            snprintf(v->rule[v->count], sizeof v->rule[0], "%.150s%s%.90s", msg ? msg : rule, res < 0 ? " / error: " : "",
                     res < 0 ? err : "");
        }
        v->count++;
    }
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (cJSON_IsObject(val) && props) {
        const cJSON *ps;
        cJSON_ArrayForEach(ps, props) {
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(val, ps->string);
            if (!m)
                continue;
            char p[256];
            snprintf(p, sizeof p, "%s.%s", path, ps->string);
            cel_check(ps, m, p, v);
        }
    } else if (cJSON_IsArray(val) && items) {
        for (int i = 0; i < cJSON_GetArraySize(val); i++) {
            char p[256];
            snprintf(p, sizeof p, "%s[%d]", path, i);
            cel_check(items, cJSON_GetArrayItem(val, i), p, v);
        }
    }
    return v->count - before;
}
