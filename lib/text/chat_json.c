/* chat_json.c - chat messages from JSON (see chat_json.h). */
#include "chat_json.h"

#include <stdlib.h>
#include <string.h>

int ntx_chat_msgs_from_json(const json_t *arr, const char *key, struct ntx_chat_msg **msgs, int *n,
			    struct ntx_err *err)
{
	struct ntx_chat_msg *m;
	size_t i, len;

	*msgs = NULL;
	*n = 0;
	if (!json_is_array(arr) || json_array_size(arr) == 0)
		return ntx_err_set(err, NTX_EINVAL, "\"%s\" must be a non-empty array", key);
	len = json_array_size(arr);
	if (len > 1 << 20)
		return ntx_err_set(err, NTX_EINVAL, "\"%s\" has %zu messages, more than %d", key, len,
				   1 << 20);
	m = calloc(len, sizeof *m);
	if (!m)
		return ntx_err_set(err, NTX_ENOMEM, "out of memory");
	for (i = 0; i < len; i++) {
		const json_t *e = json_array_get(arr, i);
		const json_t *r = json_object_get(e, "role"), *c = json_object_get(e, "content");
		const char *role = json_string_value(r);

		if (!json_is_object(e)) {
			free(m);
			return ntx_err_set(err, NTX_EINVAL, "\"%s[%zu]\" must be an object", key, i);
		}
		if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))) {
			free(m);
			return ntx_err_set(err, NTX_EINVAL,
					   "\"%s[%zu].role\" must be \"system\", \"user\" or \"assistant\"",
					   key, i);
		}
		if (!json_is_string(c)) {
			free(m);
			return ntx_err_set(err, NTX_EINVAL, "\"%s[%zu].content\" must be a string", key, i);
		}
		m[i].role = role;
		m[i].content = json_string_value(c);
	}
	*msgs = m;
	*n = (int)len;
	return 0;
}
