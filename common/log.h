/* Process-wide logging to stderr, as text or one JSON object per line. */
#ifndef HOLMES_LOG_H
#define HOLMES_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_TEXT, LOG_JSON };

void log_set_level(enum log_level level);
void log_set_format(enum log_format format);
/* Parses "debug|info|warn|error" and "text|json"; returns -1 for anything else. */
int log_parse_level(const char *s, enum log_level *out);
int log_parse_format(const char *s, enum log_format *out);
/* Names the process in every line (e.g. "operator", "worker-3"). */
void log_set_component(const char *name);
int log_enabled(enum log_level level);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
