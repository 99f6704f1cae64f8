/* test_batchreq.c - the --batch request parser (batchreq.h): defaults,
 * overrides, every error message, NUL bytes refused by name. */
#include <string.h>

#include "batchreq.h"
#include "t.h"

static int parse(const char *line, struct ntx_batch_req *r, struct ntx_err *err)
{
	struct ntx_batch_req def;

	memset(&def, 0, sizeof def);
	ntx_sampler_defaults(&def.sp);
	def.n_predict = -1;
	def.system = "default system";
	err->msg[0] = '\0';
	return ntx_batch_req_parse(line, strlen(line), &def, r, err);
}

static void bad(const char *line, const char *want, int with_id)
{
	struct ntx_batch_req r;
	struct ntx_err err;
	int rc = parse(line, &r, &err);

	t_ok(rc == -1 && strstr(err.msg, want) && (with_id ? r.id != NULL : r.id == NULL),
	     "%s: '%s' (got '%s')", line, want, err.msg);
	ntx_batch_req_free(&r);
}

int main(void)
{
	struct ntx_batch_req r;
	struct ntx_err err;

	t_ok(parse("{\"prompt\": \"hi\"}", &r, &err) == 0 && !strcmp(r.prompt, "hi") &&
		     r.n_predict == -1 && r.id == NULL && !r.chat &&
		     !strcmp(r.system, "default system"),
	     "defaults");
	ntx_batch_req_free(&r);
	t_ok(parse("{\"id\": [1], \"prompt\": \"x\", \"n_predict\": 5, \"temp\": 0, \"top_k\": 3, "
		   "\"seed\": 7, \"chat\": true, \"system\": \"s\"}", &r, &err) == 0 &&
		     json_is_array(r.id) && r.n_predict == 5 && r.sp.temp == 0 && r.sp.top_k == 3 &&
		     r.sp.seed == 7 && r.chat && !strcmp(r.system, "s"),
	     "overrides");
	ntx_batch_req_free(&r);
	bad("not json", "invalid JSON at column", 0);
	bad("[1]", "a request must be a JSON object", 0);
	bad("{\"id\": 1}", "missing \"prompt\"", 1);
	bad("{\"id\": 1, \"prompt\": 3}", "\"prompt\" must be a string", 1);
	bad("{\"id\": 1, \"prompt\": \"x\", \"n_predict\": 1.5}",
	    "\"n_predict\" must be an integer in [-1, 1073741824]", 1);
	bad("{\"id\": 1, \"prompt\": \"x\", \"top_p\": 2}", "\"top_p\" must be a number in [0, 1]", 1);
	bad("{\"id\": 1, \"prompt\": \"x\", \"chat\": 1}", "\"chat\" must be true or false", 1);
	bad("{\"id\": 1, \"prompt\": \"x\", \"system\": 1}", "\"system\" must be a string", 1);
	bad("{\"id\": 1, \"prompt\": \"x\", \"prompt\": \"y\"}", "duplicate", 0);
	/* a NUL would cut the prompt short: refused by name, not by a jansson flag */
	bad("{\"id\": 1, \"prompt\": \"a\\u0000b\"}", "NUL (\\u0000) is not allowed in a prompt", 1);
	bad("{\"id\": 1, \"prompt\": \"a\", \"system\": \"\\u0000\"}",
	    "NUL (\\u0000) is not allowed in a system message", 1);
	/* OpenAI-style messages: the chat template always applies */
	t_ok(parse("{\"id\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", &r,
		   &err) == 0 && r.messages && json_array_size(r.messages) == 1 && !r.prompt && r.chat,
	     "messages");
	ntx_batch_req_free(&r);
	bad("{\"id\": 1, \"prompt\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": \"y\"}]}",
	    "give \"prompt\" or \"messages\", not both", 1);
	bad("{\"id\": 1, \"messages\": []}", "messages", 1);
	bad("{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"y\"}], \"system\": \"s\"}",
	    "\"system\" does not apply to \"messages\"", 1);
	bad("{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}",
	    "NUL (\\u0000) is not allowed in \"messages[0].content\"", 1);
	ntx_batch_req_free(NULL);
	return t_done();
}
