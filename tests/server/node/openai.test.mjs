// strata serve through the official openai client (npm "openai", pinned in package-lock.json):
// completions and chat, streamed and not, usage counts, the cached tokens of a chat's second
// turn, and the client's error class for a wrong key. Run by ../openai_client.sh with
// STRATA_BIN (the strata binary) and STRATA_SHARED (../shared) set.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import OpenAI from 'openai';

const bin = process.env.STRATA_BIN;
const stories = `${process.env.STRATA_SHARED}/models/stories260K.gguf`;
const KEY = 'test-key-1';
const servers = [];

// Starts `strata serve ARGS --port 0` and resolves with its base URL once it listens.
function serve(args) {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, ['serve', '--port', '0', '--api-key', KEY, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
    servers.push(p);
    let err = '';
    p.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) resolve(`${m[1]}/v1`);
    });
    p.on('exit', (code) => reject(new Error(`strata serve exited ${code}: ${err}`)));
  });
}

let storiesUrl, chatUrl;
before(async () => {
  assert.ok(existsSync(stories), `${stories} is needed`);
  storiesUrl = await serve(['-m', stories, '-np', '4']);
  chatUrl = await serve(['--chat-template', 'chatml', '-np', '2']); // the built-in model
});
after(() => { for (const p of servers) p.kill('SIGTERM'); });

const client = (url, key = KEY) => new OpenAI({ baseURL: url, apiKey: key, maxRetries: 0 });

test('completion: greedy text equals strata run, usage counted', async () => {
  const r = await client(storiesUrl).completions.create({
    model: 'stories260K.gguf', prompt: 'Once upon a time', max_tokens: 24, temperature: 0,
  });
  const run = execFileSync(bin, ['run', '-m', stories, '-p', 'Once upon a time', '-n', '24', '--temp', '0'],
    { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
  assert.equal(r.choices[0].text + '\n', run);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 24);
  assert.equal(r.usage.prompt_tokens, 5); // BOS + 4 pieces
  assert.equal(r.usage.total_tokens, 29);
});

test('completion stream: the chunks make the same text, then a usage chunk', async () => {
  const c = client(storiesUrl);
  const whole = await c.completions.create({ model: 'm', prompt: 'The cat', max_tokens: 20, temperature: 0 });
  const stream = await c.completions.create({
    model: 'm', prompt: 'The cat', max_tokens: 20, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.choices.length) {
      text += ch.choices[0].text;
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
    if (ch.usage) usage = ch.usage;
  }
  assert.ok(chunks > 5);
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 20);
});

test('chat: a reply, streamed the same, and the second turn cached', async () => {
  const c = client(chatUrl);
  const messages = [
    { role: 'system', content: 'You are a test of the prefix cache, with a system prompt long enough for pages.' },
    { role: 'user', content: 'hello there' },
  ];
  const r = await c.chat.completions.create({ model: 'm', messages, max_completion_tokens: 10, temperature: 0 });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.usage.completion_tokens, 10);
  const s = await c.chat.completions.create({ model: 'm', messages, max_completion_tokens: 10, temperature: 0, stream: true });
  let text = '';
  for await (const ch of s) if (ch.choices.length) text += ch.choices[0].delta.content ?? '';
  assert.equal(text, r.choices[0].message.content);
  const turn2 = [...messages, { role: 'assistant', content: r.choices[0].message.content }, { role: 'user', content: 'again' }];
  const r2 = await c.chat.completions.create({ model: 'm', messages: turn2, max_tokens: 4, temperature: 0 });
  assert.ok(r2.usage.prompt_tokens_details.cached_tokens >= 64, `cached ${r2.usage.prompt_tokens_details.cached_tokens}`);
  assert.ok(r2.usage.prompt_tokens_details.cached_tokens < r2.usage.prompt_tokens);
});

test('logprobs: one entry per token, the greedy token the likeliest of its alternatives', async () => {
  const r = await client(chatUrl).chat.completions.create({
    model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const e of content) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 2);
    assert.equal(e.top_logprobs[0].token, e.token);
  }
});

test('errors: a wrong key is the client\'s AuthenticationError, a bad field its BadRequestError', async () => {
  await assert.rejects(client(storiesUrl, 'wrong').completions.create({ model: 'm', prompt: 'x', max_tokens: 1 }),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  await assert.rejects(client(storiesUrl).completions.create({ model: 'm', prompt: 'x', max_tokens: 'many' }),
    (e) => e instanceof OpenAI.BadRequestError && /max_tokens/.test(e.message));
});
