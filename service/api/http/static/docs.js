// Renders /openapi.json as a readable page, offline (no CDN, no framework).
"use strict";

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function schemaText(schema) { return JSON.stringify(schema, null, 2); }

async function main() {
  let spec;
  try {
    const response = await fetch("/openapi.json");
    spec = await response.json();
  } catch (err) {
    const box = document.getElementById("message");
    box.textContent = "Cannot read /openapi.json from the server.";
    box.hidden = false;
    return;
  }
  document.title = `${spec.info.title} ${spec.info.version}`;
  document.getElementById("intro").textContent = `${spec.info.title} ${spec.info.version}. ${spec.info.description}`;
  const paths = document.getElementById("paths");
  const byTag = new Map();
  for (const [path, operations] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(operations)) {
      const tag = (op.tags || ["other"])[0];
      if (!byTag.has(tag)) byTag.set(tag, []);
      byTag.get(tag).push([method, path, op]);
    }
  }
  for (const [tag, ops] of byTag) {
    const section = el("section", undefined, "panel");
    section.append(el("h2", tag));
    for (const [method, path, op] of ops) {
      const details = el("details");
      const summary = el("summary");
      summary.append(el("code", `${method.toUpperCase()} ${path}`), document.createTextNode(`  ${op.summary || ""}`));
      details.append(summary);
      if (op.parameters && op.parameters.length) {
        const list = el("ul");
        for (const p of op.parameters) list.append(el("li", `${p.name} (${p.in}${p.required ? ", required" : ""})${p.description ? ": " + p.description : ""}`));
        details.append(el("h3", "Parameters"), list);
      }
      if (op.requestBody) {
        const ref = op.requestBody.content["application/json"].schema.$ref;
        details.append(el("h3", "Body"), el("p", ref ? ref.split("/").pop() : "JSON"));
      }
      const responses = el("ul");
      for (const [code, r] of Object.entries(op.responses)) responses.append(el("li", `${code}: ${r.description}`));
      details.append(el("h3", "Responses"), responses);
      section.append(details);
    }
    paths.append(section);
  }
  const schemas = document.getElementById("schemas");
  for (const [name, schema] of Object.entries(spec.components.schemas)) {
    const details = el("details", undefined, "panel");
    details.append(el("summary", name), el("pre", schemaText(schema)));
    schemas.append(details);
  }
}

document.addEventListener("DOMContentLoaded", main);
