#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static enum log_level g_level = LOG_INFO;
static enum log_format g_format = LOG_TEXT;
static char g_component[64] = "holmes";
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level) { g_level = level; }
void log_set_format(enum log_format format) { g_format = format; }
int log_enabled(enum log_level level) { return level >= g_level; }

void log_set_component(const char *name)
{
    snprintf(g_component, sizeof g_component, "%s", name);
}

int log_parse_level(const char *s, enum log_level *out)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    return -1;
}

int log_parse_format(const char *s, enum log_format *out)
{
    if (strcmp(s, "text") == 0)
        *out = LOG_TEXT;
    else if (strcmp(s, "json") == 0)
        *out = LOG_JSON;
    else
        return -1;
    return 0;
}

/* Writes s as a JSON string body (without quotes). */
static void put_json_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < g_level)
        return;
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);

    pthread_mutex_lock(&g_lock);
    if (g_format == LOG_JSON) {
        fprintf(stderr, "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"component\":\"", when,
                ts.tv_nsec / 1000000, level_names[level]);
        put_json_escaped(stderr, g_component);
        fputs("\",\"msg\":\"", stderr);
        put_json_escaped(stderr, msg);
        fputs("\"}\n", stderr);
    } else {
        fprintf(stderr, "%s.%03ldZ %-5s %s: %s\n", when, ts.tv_nsec / 1000000, level_names[level],
                g_component, msg);
    }
    fflush(stderr);
    pthread_mutex_unlock(&g_lock);
}
