/*
 * cli_shell.c — the `tracemill query` shell: statements and dot-commands
 * read line by line from stdin. On a terminal it is interactive (libedit
 * line editing and history in ~/.tracemill_history when built with libedit,
 * TM_HAVE_LIBEDIT; a continuation prompt while a statement is open, errors
 * reported and the session going on); otherwise stdin is a script, run to
 * its end or its first error.
 *
 * A statement ends where sqlite3_complete() says so (a ';' outside quotes,
 * comments and trigger bodies), so it may span lines; a script's last
 * statement needs no ';'. A line starting with '.' while no statement is
 * open is a dot-command (the table below, listed by .help).
 *
 * Ctrl-C in the interactive shell stops the running statement, or drops
 * the statement being typed, and the shell goes on (as sqlite3's does).
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TM_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

#include "cli.h"

#define MAX_WORDS 4
#define HISTORY_LINES 1000

typedef struct shell {
    sqlite3 *db;
    cli_qout *o;
    int quit;
} shell;

/* ---- dot-commands: each returns EXIT_OK or prints why and fails ---- */

static int dot_tables(shell *sh, int argc, char **argv) {
    (void)argc, (void)argv;
    static const char sql[] = "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') "
                              "AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY name";
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(sh->db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "tracemill query: .tables: %s\n", sqlite3_errmsg(sh->db));
        return EXIT_REJECTED;
    }
    while (sqlite3_step(st) == SQLITE_ROW) fprintf(sh->o->f, "%s\n", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return EXIT_OK;
}

/* With a table: its columns and declared types as a result set in the
 * current format. Without: one "name(column type, ...)" line per table. */
static int dot_schema(shell *sh, int argc, char **argv) {
    if (argc == 2) {
        char *sql = sqlite3_mprintf("SELECT name, type FROM pragma_table_info(%Q)", argv[1]);
        char *check = sqlite3_mprintf("SELECT 1 FROM pragma_table_info(%Q)", argv[1]);
        sqlite3_stmt *st = NULL;
        int found = check && sqlite3_prepare_v2(sh->db, check, -1, &st, NULL) == SQLITE_OK &&
                    sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
        sqlite3_free(check);
        int rc = EXIT_REJECTED;
        if (!found) fprintf(stderr, "tracemill query: .schema: no such table: %s\n", argv[1]);
        else if (sql) rc = cli_query_run(sh->db, sql, ".schema", 1, sh->o);
        sqlite3_free(sql);
        return rc;
    }
    static const char sql[] = "SELECT m.name, p.name, p.type FROM sqlite_schema m, pragma_table_info(m.name) p "
                              "WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite!_%' ESCAPE '!' "
                              "ORDER BY m.name, p.cid";
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(sh->db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "tracemill query: .schema: %s\n", sqlite3_errmsg(sh->db));
        return EXIT_REJECTED;
    }
    char *table = NULL;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        int same = table && strcmp(table, name) == 0;
        if (!same) {
            fprintf(sh->o->f, "%s%s(", table ? ")\n" : "", name);
            sqlite3_free(table);
            table = sqlite3_mprintf("%s", name);
        }
        fprintf(sh->o->f, "%s%s %s", same ? ", " : "", sqlite3_column_text(st, 1), sqlite3_column_text(st, 2));
    }
    if (table) fputs(")\n", sh->o->f);
    sqlite3_free(table);
    sqlite3_finalize(st);
    return EXIT_OK;
}

static int dot_mode(shell *sh, int argc, char **argv) {
    if (argc == 1) fprintf(sh->o->f, "%s\n", cli_qformat_names[sh->o->format]);
    else if (!cli_qformat_parse(argv[1], &sh->o->format)) {
        fprintf(stderr, "tracemill query: .mode: unknown format %s (table, csv, json, perfetto)\n", argv[1]);
        return EXIT_REJECTED;
    }
    sh->o->result_sets = 0; /* a new format starts without a separator */
    return EXIT_OK;
}

static int dot_timer(shell *sh, int argc, char **argv) {
    if (argc == 1) fprintf(sh->o->f, "%s\n", sh->o->timer ? "on" : "off");
    else if (strcmp(argv[1], "on") == 0 || strcmp(argv[1], "off") == 0) sh->o->timer = argv[1][1] == 'n';
    else {
        fprintf(stderr, "tracemill query: .timer: on or off, not %s\n", argv[1]);
        return EXIT_REJECTED;
    }
    return EXIT_OK;
}

static int dot_quit(shell *sh, int argc, char **argv) {
    (void)argc, (void)argv;
    sh->quit = 1;
    return EXIT_OK;
}

static int dot_help(shell *sh, int argc, char **argv);

static const struct dot_cmd {
    const char *name, *args, *help;
    int max_args; /* words after the name */
    int (*run)(shell *sh, int argc, char **argv);
} dot_cmds[] = {
    {".tables", "", "list every table and view", 0, dot_tables},
    {".schema", "[TABLE]", "columns and types of TABLE (of every table without one)", 1, dot_schema},
    {".mode", "[table|csv|json|perfetto]", "set (or show) the output format", 1, dot_mode},
    {".timer", "[on|off]", "print (or not) each statement's wall time", 1, dot_timer},
    {".help", "", "this list", 0, dot_help},
    {".quit", "", "leave (also .exit, or Ctrl-D)", 0, dot_quit},
    {".exit", NULL, NULL, 0, dot_quit},
};
#define N_DOT_CMDS (sizeof dot_cmds / sizeof *dot_cmds)

static int dot_help(shell *sh, int argc, char **argv) {
    (void)argc, (void)argv;
    fputs("SQL statements end with ';' and may span lines. Commands:\n", sh->o->f);
    for (size_t i = 0; i < N_DOT_CMDS; i++)
        if (dot_cmds[i].help) {
            int w = 8 + 27 - (int)strlen(dot_cmds[i].name);
            fprintf(sh->o->f, "  %s %-*s %s\n", dot_cmds[i].name, w > 0 ? w : 0, dot_cmds[i].args, dot_cmds[i].help);
        }
    return EXIT_OK;
}

/* Splits line in place into at most max blank-separated words; a word may
 * be quoted with " or ' to hold blanks. Returns the count, or -1 when there
 * are more words or a quote is not closed. */
static int split_words(char *line, char **words, int max) {
    int n = 0;
    char *p = line;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) return n;
        if (n == max) return -1;
        if (*p == '"' || *p == '\'') {
            char q = *p++;
            words[n++] = p;
            p = strchr(p, q);
            if (!p) return -1;
        } else {
            words[n++] = p;
            while (*p && !isspace((unsigned char)*p)) p++;
            if (!*p) return n;
        }
        *p++ = 0;
    }
}

static int dot_command(shell *sh, char *line, int line_no) {
    char *words[MAX_WORDS];
    int n = split_words(line, words, MAX_WORDS);
    for (size_t i = 0; n > 0 && i < N_DOT_CMDS; i++) {
        if (strcmp(words[0], dot_cmds[i].name) != 0) continue;
        if (n - 1 > dot_cmds[i].max_args) break;
        return dot_cmds[i].run(sh, n, words);
    }
    fprintf(stderr, "tracemill query: stdin:%d: unknown command or bad arguments: %s (try .help)\n", line_no,
            n > 0 ? words[0] : line);
    return EXIT_REJECTED;
}

/* ---- Ctrl-C ---- */

static cli_qout *interruptible; /* the interactive shell's output state */

static void on_interrupt(int sig) {
    (void)sig;
    interruptible->cancel = 1; /* the progress handler stops the statement */
}

/* Without SA_RESTART, so that Ctrl-C also ends the wait for a line. */
static void catch_interrupt(cli_qout *o, struct sigaction *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    interruptible = o;
    sigaction(SIGINT, &sa, old);
}

/* ---- reading lines ---- */

static char *history_file(void) {
    const char *home = getenv("HOME");
    if (!home || !*home) return NULL;
    size_t n = strlen(home) + sizeof "/.tracemill_history";
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/.tracemill_history", home);
    return p;
}

/* The next line without its line end (malloc'd), NULL at the end of input. */
static char *next_line(int interactive, int continuation) {
    const char *prompt = continuation ? "      ...> " : "tracemill> ";
#ifdef TM_HAVE_LIBEDIT
    if (interactive) {
        char *l = readline(prompt);
        if (l && *l) add_history(l);
        return l;
    }
#else
    if (interactive) { /* no line editing: a prompt, then a plain read */
        fputs(prompt, stderr);
        fflush(stderr);
        clearerr(stdin); /* Ctrl-C interrupted the last read */
    }
#endif
    char *l = NULL;
    size_t cap = 0;
    ssize_t n = getline(&l, &cap, stdin);
    if (n < 0) {
        free(l);
        return NULL;
    }
    while (n > 0 && (l[n - 1] == '\n' || l[n - 1] == '\r')) l[--n] = 0;
    return l;
}

static int blank(const char *s) {
    while (isspace((unsigned char)*s)) s++;
    return *s == 0;
}

/* The SQL of the statement being read, across lines. */
typedef struct text_buf {
    char *data;
    size_t len, cap;
} text_buf;

static int append_line(text_buf *b, const char *line) {
    size_t n = strlen(line);
    if (b->len + n + 2 > b->cap) {
        size_t cap = (b->len + n + 2) * 2;
        char *p = realloc(b->data, cap);
        if (!p) return 0;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, line, n);
    b->len += n;
    memcpy(b->data + b->len++, "\n", 2);
    return 1;
}

int cli_query_shell(sqlite3 *db, cli_qout *o, int interactive) {
    shell sh = {db, o, 0};
    char *history = interactive ? history_file() : NULL;
    if (interactive) {
#ifdef TM_HAVE_LIBEDIT
        stifle_history(HISTORY_LINES);
        if (history) read_history(history);
#endif
        fputs("tracemill query shell: .help for commands, .quit to leave\n", stderr);
    }
    struct sigaction old_sigint;
    if (interactive) catch_interrupt(o, &old_sigint);
    text_buf b = {0};
    int rc = EXIT_OK, line_no = 0, first_line = 1;
    for (;;) {
        o->cancel = 0;
        char *line = sh.quit ? NULL : next_line(interactive, b.len > 0);
        if (!line && interactive && o->cancel) { /* Ctrl-C at the prompt: drop what was typed */
            fputc('\n', stderr);
            b.len = 0;
            first_line = line_no + 1;
            continue;
        }
        if (!line) break;
        int r = EXIT_OK;
        line_no++;
        if (b.len == 0 && line[strspn(line, " \t")] == '.') {
            r = dot_command(&sh, line, line_no);
        } else if (b.len > 0 || !blank(line)) {
            if (!append_line(&b, line)) {
                fprintf(stderr, "tracemill query: out of memory\n");
                r = EXIT_IO;
            } else if (sqlite3_complete(b.data)) {
                r = cli_query_run(db, b.data, "stdin", first_line, o);
                b.len = 0;
            }
        }
        free(line);
        fflush(o->f);
        if (b.len == 0) first_line = line_no + 1;
        if (r != EXIT_OK && (!interactive || r == EXIT_IO)) {
            rc = r;
            break;
        }
    }
    if (interactive && !sh.quit) fputc('\n', stderr); /* end the prompt's line after Ctrl-D */
    if (rc == EXIT_OK && b.len > 0 && !sh.quit) rc = cli_query_run(db, b.data, "stdin", first_line, o);
    if (interactive) sigaction(SIGINT, &old_sigint, NULL);
#ifdef TM_HAVE_LIBEDIT
    if (interactive && history) write_history(history);
#endif
    free(history);
    free(b.data);
    return interactive && rc != EXIT_IO ? EXIT_OK : rc;
}
