// Audio for models that hear: a WAV, MP3 or FLAC file, or a recording from the microphone,
// as an attachment {name, data (base64)} that the chat sends in a message's "images" (Ollama's
// field carries audio too). The browser records in its own codec (Opus, AAC), which the daemon
// does not take, so a recording is decoded by the browser and sent as a 16 kHz 16-bit WAV.

const RECORD_RATE = 16000;  // what Whisper-style encoders hear; the daemon would resample to it anyway

// "WAV", "MP3" or "FLAC" when the bytes start as one (as the daemon tells them apart), else null.
function containerOf(bytes) {
  const text = (start, end) => String.fromCharCode(...bytes.subarray(start, end));
  if (text(0, 4) === "RIFF" && text(8, 12) === "WAVE") return "WAV";
  if (text(0, 4) === "fLaC") return "FLAC";
  if (text(0, 3) === "ID3" || (bytes[0] === 0xff && (bytes[1] & 0xe0) === 0xe0)) return "MP3";
  return null;
}

function base64(bytes) {
  let binary = "";
  for (let start = 0; start < bytes.length; start += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(start, start + 0x8000));
  }
  return btoa(binary);
}

// The attachment of an audio file; throws a message naming the file when it is not WAV, MP3 or FLAC.
export async function fileAttachment(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  if (!containerOf(bytes)) throw new Error(`${file.name} is not a WAV, MP3 or FLAC file`);
  return { name: file.name, data: base64(bytes) };
}

// Whether this browser lets the page record the microphone (a secure context with MediaRecorder).
export function canRecord() {
  return Boolean(window.isSecureContext && navigator.mediaDevices?.getUserMedia && window.MediaRecorder);
}

// Mono samples in [-1, 1] as a 16-bit PCM WAV file.
function wavBytes(samples, rate) {
  const out = new DataView(new ArrayBuffer(44 + samples.length * 2));
  const ascii = (offset, text) => [...text].forEach((c, i) => out.setUint8(offset + i, c.charCodeAt(0)));
  ascii(0, "RIFF");
  out.setUint32(4, 36 + samples.length * 2, true);
  ascii(8, "WAVEfmt ");
  out.setUint32(16, 16, true);
  out.setUint16(20, 1, true);  // PCM
  out.setUint16(22, 1, true);  // mono
  out.setUint32(24, rate, true);
  out.setUint32(28, rate * 2, true);
  out.setUint16(32, 2, true);
  out.setUint16(34, 16, true);
  ascii(36, "data");
  out.setUint32(40, samples.length * 2, true);
  samples.forEach((sample, i) => out.setInt16(44 + i * 2, Math.max(-1, Math.min(1, sample)) * 0x7fff, true));
  return new Uint8Array(out.buffer);
}

// A recording from the microphone: start() asks for it, stop() resolves to its attachment.
export class Recorder {
  async start() {
    this.stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    this.chunks = [];
    this.recorder = new MediaRecorder(this.stream);
    this.recorder.ondataavailable = (event) => this.chunks.push(event.data);
    this.recorder.start();
  }

  stop(name) {
    return new Promise((resolve, reject) => {
      this.recorder.onstop = async () => {
        this.stream.getTracks().forEach((track) => track.stop());
        try {
          const encoded = await new Blob(this.chunks, { type: this.recorder.mimeType }).arrayBuffer();
          const context = new AudioContext({ sampleRate: RECORD_RATE });
          const decoded = await context.decodeAudioData(encoded);
          await context.close();
          resolve({ name, data: base64(wavBytes(decoded.getChannelData(0), decoded.sampleRate)) });
        } catch (error) {
          reject(new Error(`the recording could not be read: ${error.message}`));
        }
      };
      this.recorder.stop();
    });
  }

  cancel() {
    if (this.recorder?.state === "recording") this.recorder.stop();
    this.stream?.getTracks().forEach((track) => track.stop());
  }
}
