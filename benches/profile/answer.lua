-- wrk script: answers each gate listed in the file PATHS once, the threads taking turns.
local paths = {}
for line in io.lines(os.getenv("PATHS")) do paths[#paths + 1] = line end

local threads, counter = 0, 0
function setup(thread)
  thread:set("first", threads)
  threads = threads + 1
end

function init()
  stride, next_index = tonumber(os.getenv("THREADS")), first + 1
end

local body = '{"action":"answer","values":{"answer":"yes"}}'
function request()
  local path = paths[next_index]
  if path == nil then
    wrk.thread:stop()
    return wrk.format("GET", "/healthz")
  end
  next_index = next_index + stride
  return wrk.format("POST", path, {["Content-Type"] = "application/json", ["Idempotency-Key"] = "profile-" .. path}, body)
end

function response(status)
  if status ~= 202 and status ~= 200 then
    io.stderr:write("answer: status " .. status .. "\n")
  end
end
