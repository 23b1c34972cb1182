// A small JSON Schema checker for an approver's edit of a tool call's input, so an edit that
// cannot pass is refused before anything is sent. It knows the common keywords only (type,
// required, properties, additionalProperties, patternProperties, enum, const, min/maxLength,
// pattern, minimum/maximum and their exclusive forms, items, min/maxItems); any other keyword is
// left to the server, which validates fully and answers 400 with its own field problems.

/** Problems of `value` against `schema`: [{ path, message }], `path` a JSON Pointer into value. */
export function checkAgainstSchema(value, schema) {
  const problems = [];
  walk(value, schema, '', problems);
  return problems;
}

/** Deep equality of JSON values (member order does not matter, as for the server). */
export function jsonEqual(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((item, i) => jsonEqual(item, b[i]));
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((key) => Object.hasOwn(b, key) && jsonEqual(a[key], b[key]));
}

/** One JSON Pointer token: `~` and `/` escaped as RFC 6901 says. */
export function pointerToken(name) {
  return String(name).replaceAll('~', '~0').replaceAll('/', '~1');
}

const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value);

function hasType(value, type) {
  switch (type) {
    case 'null':
      return value === null;
    case 'boolean':
      return typeof value === 'boolean';
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number';
    case 'integer':
      return Number.isInteger(value);
    case 'array':
      return Array.isArray(value);
    case 'object':
      return isObject(value);
    default:
      return true; // not a type we know: the server decides
  }
}

function article(type) {
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/** A pattern the browser cannot compile is the server's to judge, not a reason to refuse. */
function matches(pattern, text) {
  try {
    return new RegExp(pattern, 'u').test(text);
  } catch {
    return true;
  }
}

function walk(value, schema, path, out) {
  if (schema === false) {
    out.push({ path, message: 'no value is allowed here' });
    return;
  }
  if (!isObject(schema)) return; // `true`, or nothing to check

  if (schema.type !== undefined) {
    const types = [].concat(schema.type);
    if (!types.some((type) => hasType(value, type))) {
      // Every other check assumes the right type: one problem is enough.
      out.push({ path, message: `must be ${types.map(article).join(' or ')}` });
      return;
    }
  }
  if (Object.hasOwn(schema, 'const') && !jsonEqual(value, schema.const)) {
    out.push({ path, message: `must be ${JSON.stringify(schema.const)}` });
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((choice) => jsonEqual(value, choice))) {
    out.push({ path, message: `must be one of ${schema.enum.map((choice) => JSON.stringify(choice)).join(', ')}` });
  }

  if (typeof value === 'string') {
    const length = [...value].length; // characters, not UTF-16 units, as JSON Schema counts
    if (typeof schema.minLength === 'number' && length < schema.minLength) {
      out.push({ path, message: `must be at least ${schema.minLength} characters long` });
    }
    if (typeof schema.maxLength === 'number' && length > schema.maxLength) {
      out.push({ path, message: `must be at most ${schema.maxLength} characters long` });
    }
    if (typeof schema.pattern === 'string' && !matches(schema.pattern, value)) {
      out.push({ path, message: `must match the pattern ${schema.pattern}` });
    }
  }

  if (typeof value === 'number') {
    if (typeof schema.minimum === 'number' && value < schema.minimum) out.push({ path, message: `must be at least ${schema.minimum}` });
    if (typeof schema.maximum === 'number' && value > schema.maximum) out.push({ path, message: `must be at most ${schema.maximum}` });
    if (typeof schema.exclusiveMinimum === 'number' && value <= schema.exclusiveMinimum) {
      out.push({ path, message: `must be more than ${schema.exclusiveMinimum}` });
    }
    if (typeof schema.exclusiveMaximum === 'number' && value >= schema.exclusiveMaximum) {
      out.push({ path, message: `must be less than ${schema.exclusiveMaximum}` });
    }
  }

  if (Array.isArray(value)) {
    if (typeof schema.minItems === 'number' && value.length < schema.minItems) out.push({ path, message: `must have at least ${schema.minItems} items` });
    if (typeof schema.maxItems === 'number' && value.length > schema.maxItems) out.push({ path, message: `must have at most ${schema.maxItems} items` });
    // `items` as one schema for every item; the older tuple form, one schema per position.
    value.forEach((item, i) => {
      const itemSchema = Array.isArray(schema.items) ? schema.items[i] : schema.items;
      if (itemSchema !== undefined) walk(item, itemSchema, `${path}/${i}`, out);
    });
  }

  if (isObject(value)) {
    for (const name of Array.isArray(schema.required) ? schema.required : []) {
      if (!Object.hasOwn(value, name)) out.push({ path: `${path}/${pointerToken(name)}`, message: 'is required' });
    }
    const properties = isObject(schema.properties) ? schema.properties : {};
    const patterns = isObject(schema.patternProperties) ? Object.entries(schema.patternProperties) : [];
    for (const [name, member] of Object.entries(value)) {
      const at = `${path}/${pointerToken(name)}`;
      let known = false;
      if (Object.hasOwn(properties, name)) {
        known = true;
        walk(member, properties[name], at, out);
      }
      for (const [pattern, memberSchema] of patterns) {
        if (matches(pattern, name)) {
          known = true;
          walk(member, memberSchema, at, out);
        }
      }
      if (!known && schema.additionalProperties === false) {
        out.push({ path: at, message: `“${name}” is not allowed here` });
      } else if (!known && schema.additionalProperties !== undefined) {
        walk(member, schema.additionalProperties, at, out);
      }
    }
  }
}
