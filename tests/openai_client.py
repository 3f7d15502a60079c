"""The official `openai` Python client against a running `tessera serve`
(tests/serve_openai.rs runs it). Prints one JSON object with what it got."""
import json
import sys

import openai

base, user = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="not-needed")
model = client.models.list().data[0].id

chat = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": user}],
    max_tokens=24,
    temperature=0,
    extra_body={"enable_thinking": False},
)
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": user}],
    max_tokens=24,
    temperature=0,
    extra_body={"enable_thinking": False},
    stream=True,
    stream_options={"include_usage": True},
)
streamed, chunks, usage = "", 0, None
for c in stream:
    if c.choices:
        streamed += c.choices[0].delta.content or ""
        chunks += 1
    if c.usage:
        usage = c.usage.completion_tokens
text = client.completions.create(model=model, prompt="Hello world", max_tokens=12, temperature=0)
text_stream = "".join(
    c.choices[0].text
    for c in client.completions.create(
        model=model, prompt="Hello world", max_tokens=12, temperature=0, stream=True
    )
)
try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    not_found = None
except openai.NotFoundError as e:
    not_found = e.status_code
try:
    client.completions.create(model=model, prompt="hi", max_tokens=100000)
    too_long = None
except openai.BadRequestError as e:
    too_long = e.code

print(
    json.dumps(
        {
            "model": model,
            "chat": chat.choices[0].message.content,
            "chat_finish": chat.choices[0].finish_reason,
            "chat_usage": chat.usage.completion_tokens,
            "streamed": streamed,
            "stream_chunks": chunks,
            "stream_usage": usage,
            "text": text.choices[0].text,
            "text_stream": text_stream,
            "not_found": not_found,
            "too_long": too_long,
        }
    )
)
