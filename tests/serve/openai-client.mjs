// openai-client.mjs - the official openai npm package against ntx-serve:
// one non-streaming and one streaming chat completion (greedy), and a
// completion. Prints one JSON object with what came back.
//   node openai-client.mjs BASE_URL API_KEY USER_TEXT MAX_TOKENS
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "node_modules-dir", "package.json"));
const OpenAI = require("openai");

const [base, key, text, maxTok] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
const models = await client.models.list();
const model = models.data[0].id;
const messages = [{ role: "user", content: text }];
const max_tokens = Number(maxTok);

const r = await client.chat.completions.create({ model, messages, max_tokens, temperature: 0 });
const stream = await client.chat.completions.create({
	model, messages, max_tokens, temperature: 0, stream: true,
	stream_options: { include_usage: true },
});
let content = "", chunks = 0, finish = null, usage = null, role = null;
for await (const ch of stream) {
	chunks++;
	if (ch.usage) usage = ch.usage;
	for (const c of ch.choices) {
		if (c.delta.role) role = c.delta.role;
		if (c.delta.content) content += c.delta.content;
		if (c.finish_reason) finish = c.finish_reason;
	}
}
const cmpl = await client.completions.create({ model, prompt: text, max_tokens, temperature: 0 });
console.log(JSON.stringify({
	model,
	chat_template: models.data[0].chat_template,
	chat: { content: r.choices[0].message.content, role: r.choices[0].message.role,
		finish: r.choices[0].finish_reason, usage: r.usage, object: r.object },
	stream: { content, chunks, finish, usage, role },
	completion: { text: cmpl.choices[0].text, finish: cmpl.choices[0].finish_reason,
		      usage: cmpl.usage },
}));
