/* GET / : the dashboard (src/server/dash/, compiled in by cmake/embed.cmake).
 *
 * Served without the API key: the page holds no data, and every route it reads (/slots,
 * /metrics, /v1/chat/completions) still asks for the key, which the user types into the page.
 * The Content-Security-Policy lets it load and connect to this server only, run no inline
 * script and be framed by no other site, so text a model writes cannot become markup that
 * acts (the page also shows it as text, never as HTML). */
#include "server/server_int.h"

#include <string.h>

static const char dash_csp[] = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                               "frame-ancestors 'none'";

int srv_dashboard(struct MHD_Connection *con, const char *url, enum MHD_Result *r) {
    if (!strcmp(url, "/")) url = "/index.html";
    const srv_asset *a = NULL;
    for (int i = 0; i < srv_n_assets && !a; i++)
        if (!strcmp(url, srv_assets[i].path)) a = &srv_assets[i];
    if (!a) return 0;
    /* the bytes are static: libmicrohttpd sends them in place */
    struct MHD_Response *res = MHD_create_response_from_buffer(a->n, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!res) {
        *r = MHD_NO;
        return 1;
    }
    MHD_add_response_header(res, "Content-Type", a->type);
    MHD_add_response_header(res, "Content-Security-Policy", dash_csp);
    MHD_add_response_header(res, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(res, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(res, "Cache-Control", "no-cache");
    *r = MHD_queue_response(con, MHD_HTTP_OK, res);
    MHD_destroy_response(res);
    return 1;
}
